package domain

import (
	"fmt"
	"slices"
)

// DefaultProvider is the name of the provider the single-provider settings
// (REVIEWLEDGER_PROVIDER and its companions) configure, and the provider of
// every class whose policy names none. An AttemptStarted without a provider
// was sent to it.
const DefaultProvider = "default"

// MaxProviderNameLen bounds a provider's name: it labels metrics and is
// recorded in every AttemptStarted that goes elsewhere than the default.
const MaxProviderNameLen = 64

// ValidProviderName reports whether name can name a provider: 1 to 64 of
// a-z, 0-9, _ and -, starting with a letter.
func ValidProviderName(name string) bool {
	if name == "" || len(name) > MaxProviderNameLen || name[0] < 'a' || name[0] > 'z' {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '_' && c != '-' {
			return false
		}
	}
	return true
}

// Route returns the providers a review of the class may be sent to, in
// order: the primary, then its fallbacks. A class that names none has the
// default provider alone.
func (p ClassPolicy) Route() []string {
	if len(p.Providers) == 0 {
		return []string{DefaultProvider}
	}
	return p.Providers
}

// validateProviders checks the class's provider and shadows keys: valid
// names, none twice, and no shadow that also decides.
func (p ClassPolicy) validateProviders(class string) error {
	bad := func(key, format string, args ...any) error {
		return &PolicyError{Class: class, Key: key, Reason: fmt.Sprintf(format, args...)}
	}
	for i, name := range p.Providers {
		key := "provider"
		if i > 0 {
			key = "fallbacks"
		}
		switch {
		case !ValidProviderName(name):
			return bad(key, "%q is not a provider name (1 to %d of a-z, 0-9, _ and -, starting with a letter)", name, MaxProviderNameLen)
		case slices.Index(p.Providers, name) != i:
			return bad(key, "provider %q is named twice", name)
		}
	}
	for i, name := range p.Shadows {
		switch {
		case !ValidProviderName(name):
			return bad("shadows", "%q is not a provider name (1 to %d of a-z, 0-9, _ and -, starting with a letter)", name, MaxProviderNameLen)
		case slices.Index(p.Shadows, name) != i:
			return bad("shadows", "provider %q is named twice", name)
		case slices.Contains(p.Route(), name):
			return bad("shadows", "provider %q also decides the class: a shadow only observes", name)
		}
	}
	return nil
}

// ProviderNames returns every provider the policy's classes name (route and
// shadows), each once, in sorted order.
func (p Policy) ProviderNames() []string {
	var names []string
	for _, c := range p.Classes {
		names = append(names, c.Route()...)
		names = append(names, c.Shadows...)
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// route returns Facts.Route, or the default provider alone when empty.
func (f Facts) route() []string {
	if len(f.Route) == 0 {
		return []string{DefaultProvider}
	}
	return f.Route
}

// pick chooses the provider of the attempt about to start in the current
// round, from the class's route (Facts.Route) and the other facts:
//
//   - the round's first attempt goes to the primary;
//   - after an attempt that failed in a way that counts against its
//     provider (anything but a recovery: a timeout, a transport error, 5xx,
//     429, an invalid finding), the next goes to the next provider of the
//     route, wrapping around; after a recovery (our own fault: a worker
//     lost, a store failure, a shutdown), to the same provider again;
//   - a provider whose circuit is open (Facts.Open) is passed over, and for
//     a retry so is one whose retry budget refused it (Facts.BudgetSpent,
//     or every provider when Facts.RetryAllowed is false);
//   - when every provider's circuit is open, the circuits are ignored: the
//     attempt goes to the one preferred above (it probes it), so a class
//     with one provider behaves as it would without a breaker.
//
// ok is false when no provider's retry budget has room for the retry.
// fresh reports that the chosen provider has not been tried in the round:
// a failover needs no backoff, the wait being owed to the provider that
// failed.
func (r *Review) pick(f Facts, retry bool) (name string, fresh, ok bool) {
	route := f.route()
	from := 0
	if r.RoundAttempts() > 0 {
		from = max(0, slices.Index(route, r.lastFailure.Provider))
		if !r.lastFailure.Classification.Recovery() {
			from++
		}
	}
	spent := func(name string) bool { return retry && (!f.RetryAllowed || slices.Contains(f.BudgetSpent, name)) }
	choose := func(skipOpen bool) (string, bool) {
		for i := range route {
			name := route[(from+i)%len(route)]
			if !spent(name) && (!skipOpen || !slices.Contains(f.Open, name)) {
				return name, true
			}
		}
		return "", false
	}
	name, ok = choose(true)
	if !ok {
		name, ok = choose(false)
	}
	return name, ok && !slices.Contains(r.tried, name), ok
}
