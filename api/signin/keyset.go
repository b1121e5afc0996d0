package signin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	jose "github.com/go-jose/go-jose/v4"
)

// DefaultKeyRefetch is the least time between two fetches of the key set
// that a token failing against the cached keys may cause.
const DefaultKeyRefetch = 10 * time.Second

var joseAlgorithms = []jose.SignatureAlgorithm{jose.RS256, jose.ES256}

// keySet is the provider's key set (its jwks_uri), cached. A token whose
// signature no cached key verifies (a key not seen yet: the provider
// rotated) has the set fetched again, but no sooner than refetch after the
// last fetch: go-oidc's own key set fetches again for every such token,
// so anyone could make reviewledger call the provider once per request by
// sending tokens with made-up key IDs or signatures. Signatures are go-jose's.
type keySet struct {
	url     string
	client  *http.Client
	now     func() time.Time
	refetch time.Duration

	mu        sync.Mutex // one fetch at a time
	keys      []jose.JSONWebKey
	fetchedAt time.Time
	fetches   int
}

// VerifySignature implements oidc.KeySet.
func (k *keySet) VerifySignature(ctx context.Context, raw string) ([]byte, error) {
	jws, err := jose.ParseSignedCompact(raw, joseAlgorithms)
	if err != nil {
		return nil, fmt.Errorf("malformed jwt: %w", err)
	}
	kid := ""
	if len(jws.Signatures) > 0 {
		kid = jws.Signatures[0].Header.KeyID
	}
	k.mu.Lock()
	keys, fetchedAt := k.keys, k.fetchedAt
	k.mu.Unlock()
	if payload, ok := verifyWith(jws, keys, kid); ok {
		return payload, nil
	}
	if keys, err = k.fetch(ctx, fetchedAt); err != nil {
		return nil, err
	}
	if payload, ok := verifyWith(jws, keys, kid); ok {
		return payload, nil
	}
	return nil, errors.New("no key of the provider's key set verifies the signature")
}

func verifyWith(jws *jose.JSONWebSignature, keys []jose.JSONWebKey, kid string) ([]byte, bool) {
	for i := range keys {
		if kid != "" && keys[i].KeyID != kid {
			continue
		}
		if payload, err := jws.Verify(&keys[i]); err == nil {
			return payload, true
		}
	}
	return nil, false
}

// fetch reads the key set again unless it was read after seen (by a
// concurrent request) or less than refetch ago; it returns the keys then
// cached.
func (k *keySet) fetch(ctx context.Context, seen time.Time) ([]jose.JSONWebKey, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.fetchedAt.After(seen) || (!k.fetchedAt.IsZero() && k.now().Sub(k.fetchedAt) < k.refetch) {
		return k.keys, nil
	}
	keys, err := k.get(ctx)
	k.fetchedAt = k.now()
	k.fetches++
	if err != nil {
		return k.keys, fmt.Errorf("key set %s: %w", k.url, err)
	}
	k.keys = keys
	return keys, nil
}

func (k *keySet) get(ctx context.Context) ([]jose.JSONWebKey, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, k.url, nil)
	if err != nil {
		return nil, err
	}
	res, err := k.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	body, err := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	if err != nil {
		return nil, err
	}
	if res.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("HTTP %d", res.StatusCode)
	}
	var set struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(body, &set); err != nil {
		return nil, err
	}
	var keys []jose.JSONWebKey
	for _, raw := range set.Keys {
		var key jose.JSONWebKey
		// A key of a type go-jose does not know (or for encryption) is
		// skipped, as go-oidc skips it.
		if json.Unmarshal(raw, &key) != nil || (key.Use != "" && key.Use != "sig") {
			continue
		}
		keys = append(keys, key)
	}
	return keys, nil
}
