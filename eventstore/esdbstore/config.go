package esdbstore

import (
	"fmt"
	"log/slog"
	"net/url"
	"strings"
)

// Config says where the server is and tunes a Store.
type Config struct {
	// URL is the connection string: esdb://, esdb+discover:// or the
	// KurrentDB spellings kurrentdb://, kurrentdb+discover://, kurrent://
	// and kurrent+discover://, with the client's settings in the query
	// (tls=false, nodePreference=leader, ...). Required.
	URL string
	// ReadBatch is how many $all records ReadAll asks for at a time at
	// least. System records are skipped on this side, so a larger batch
	// crosses stretches of them in fewer round trips. Default 256.
	ReadBatch int
	// Logger receives the client's own log lines, at debug level.
	// Default slog.Default().
	Logger *slog.Logger
}

func (c *Config) setDefaults() {
	if c.ReadBatch <= 0 {
		c.ReadBatch = 256
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Validate reports the first setting that cannot work, naming it.
func (c *Config) Validate() error {
	if c.URL == "" {
		return fmt.Errorf("esdbstore: URL: %w", ErrInvalidURL)
	}
	if _, err := normalizeURL(c.URL); err != nil {
		return err
	}
	return nil
}

// schemes maps the connection-string schemes accepted here to the ones the
// client (v4) parses. KurrentDB servers speak the same protocol.
var schemes = map[string]string{
	"esdb":               "esdb",
	"esdb+discover":      "esdb+discover",
	"kurrentdb":          "esdb",
	"kurrentdb+discover": "esdb+discover",
	"kurrent":            "esdb",
	"kurrent+discover":   "esdb+discover",
}

// settings are the query keys the client understands, lower-cased. The
// client only logs a warning for other keys; here they are refused, so a
// misspelt tls=false fails at start rather than at the first connection.
var settings = map[string]bool{
	"discoveryinterval":   true,
	"gossiptimeout":       true,
	"maxdiscoverattempts": true,
	"nodepreference":      true,
	"keepaliveinterval":   true,
	"keepalivetimeout":    true,
	"tls":                 true,
	"tlscafile":           true,
	"usercertfile":        true,
	"userkeyfile":         true,
	"tlsverifycert":       true,
	"defaultdeadline":     true,
}

// normalizeURL checks a connection string's scheme and settings and rewrites
// the KurrentDB schemes to the ones the client knows. Credentials in the
// string never appear in its errors.
func normalizeURL(raw string) (string, error) {
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return "", fmt.Errorf("esdbstore: URL: no scheme (want esdb:// or kurrentdb://): %w", ErrInvalidURL)
	}
	client, known := schemes[strings.ToLower(scheme)]
	if !known {
		return "", fmt.Errorf("esdbstore: URL: scheme %q (want esdb, esdb+discover, kurrentdb or kurrentdb+discover): %w", scheme, ErrInvalidURL)
	}
	if _, query, hasQuery := strings.Cut(rest, "?"); hasQuery {
		values, err := url.ParseQuery(query)
		if err != nil {
			return "", fmt.Errorf("esdbstore: URL: settings: %v: %w", err, ErrInvalidURL)
		}
		for key := range values {
			if !settings[strings.ToLower(key)] {
				return "", fmt.Errorf("esdbstore: URL: unknown setting %q: %w", key, ErrInvalidURL)
			}
		}
	}
	return client + "://" + rest, nil
}

// password returns the password in a connection string, or "".
func password(raw string) string {
	_, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return ""
	}
	authority := strings.SplitN(rest, "/", 2)[0]
	at := strings.LastIndex(authority, "@")
	if at < 0 {
		return ""
	}
	_, pw, _ := strings.Cut(authority[:at], ":")
	return pw
}

// scrub removes the connection string's password from a message, so that
// client and URL parser errors can be shown.
func scrub(msg, raw string) string {
	if pw := password(raw); pw != "" {
		msg = strings.ReplaceAll(msg, pw, "xxxxx")
	}
	return msg
}
