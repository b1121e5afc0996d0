package main

import (
	"strings"
	"testing"
)

// The budget gives each role's sessions their share and DATABASE_URL's
// pool the rest; a budget too small for the roles, or a pool_max_conns
// that does not fit, is refused naming REVIEWLEDGER_DB_MAX_CONNS.
func TestConfigConnectionBudget(t *testing.T) {
	const db = "postgres://postgres@127.0.0.1:5432/reviewledger?sslmode=disable"
	const replica = "postgres://postgres@127.0.0.1:5433/reviewledger?sslmode=disable"
	tests := []struct {
		name string
		args []string
		want connBudget
	}{
		{"every role", nil, connBudget{Held: 6, Sess: 1, Pool: 25}},
		{"webhooks", []string{"--notify-url=http://hooks.example/decisions", "--notify-secret=whsec_c2VjcmV0LXNlY3JldC1zZWNyZXQ="}, connBudget{Held: 7, Sess: 1, Pool: 24}},
		{"projector and sweeper", []string{"--roles=projector,sweeper", "--pubsub=nats", "--db-max-conns=10"}, connBudget{Held: 6, Sess: 1, Pool: 3}},
		{"worker without sweeps", []string{"--roles=worker", "--pubsub=nats", "--no-worker-sweeps", "--db-max-conns=10"}, connBudget{Held: 1, Sess: 1, Pool: 8}},
		{"api with a replica", []string{"--roles=api", "--pubsub=nats", "--read-database-url=" + replica, "--db-max-conns=10"}, connBudget{Held: 1, Sess: 1, Read: 2, Pool: 6}},
		{"pool_max_conns sizes the pool", []string{"--database-url=" + db + "&pool_max_conns=8"}, connBudget{Held: 6, Sess: 1, Pool: 8}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			setEnv(t, map[string]string{"DATABASE_URL": db})
			var cli CLI
			if _, err := kongParse(&cli, append([]string{"serve"}, tc.args...)...); err != nil {
				t.Fatal(err)
			}
			got, err := cli.Serve.budget()
			if err != nil || got != tc.want {
				t.Fatalf("budget %+v, %v; want %+v", got, err, tc.want)
			}
			if got.Total() > cli.Serve.Pools.DBMaxConns {
				t.Fatalf("budget %+v holds %d sessions, more than %d", got, got.Total(), cli.Serve.Pools.DBMaxConns)
			}
		})
	}
	refused := []struct {
		name string
		env  map[string]string
		want string
	}{
		{"not a number", map[string]string{"REVIEWLEDGER_DB_MAX_CONNS": "many"}, "REVIEWLEDGER_DB_MAX_CONNS"},
		{"zero", map[string]string{"REVIEWLEDGER_DB_MAX_CONNS": "0"}, "REVIEWLEDGER_DB_MAX_CONNS: must be a positive number"},
		{"too small for the roles", map[string]string{"REVIEWLEDGER_DB_MAX_CONNS": "6"}, "REVIEWLEDGER_DB_MAX_CONNS: 6 server sessions do not hold this process's roles (api,worker,projector): 6 held by its elections and LISTEN, 1 session pool, 0 for the read pool and at least 2 for DATABASE_URL's pool; raise it to 9"},
		{"pool_max_conns too large", map[string]string{"DATABASE_URL": db + "&pool_max_conns=40"}, "raise it to 47"},
		{"session url", map[string]string{"REVIEWLEDGER_SESSION_DATABASE_URL": "postgres://%zz"}, "REVIEWLEDGER_SESSION_DATABASE_URL"},
	}
	for _, tc := range refused {
		t.Run(tc.name, func(t *testing.T) {
			setEnv(t, tc.env)
			var cli CLI
			_, err := kongParse(&cli, "serve")
			if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("got %v; want one line containing %q", err, tc.want)
			}
		})
	}
}
