package projections

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reviewledger/reviewledger/migrations/dbtest"
)

// unreachablePool is a pool on a port nothing listens on.
func unreachablePool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	pool, err := pgxpool.New(context.Background(), "postgres://postgres@"+addr+"/none?sslmode=disable&connect_timeout=1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// A read database that is not a standby, or does not answer, never serves
// the read models; a query that fails on the replica is answered by the
// primary, and the replica is left until a check finds it well.
func TestReplicaFallsBackToThePrimary(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	primary := dbtest.Pool(t)

	// The primary itself given as the replica: it is not in recovery.
	notStandby := NewReplica(primary, primary, time.Minute, quiet)
	if st := notStandby.Check(ctx); st.Serving != ServingPrimary || st.Up {
		t.Errorf("a read database that is not a standby: %+v, want the primary serving", st)
	}

	down := NewReplica(primary, unreachablePool(t), time.Minute, quiet)
	if st := down.Check(ctx); st.Serving != ServingPrimary || st.Up {
		t.Errorf("an unreachable replica: %+v, want the primary serving", st)
	}
	// As if the last check had found it well: the query fails there and
	// is answered by the primary.
	down.mu.Lock()
	down.st = ReplicaStatus{Serving: ServingReplica, Up: true}
	down.mu.Unlock()
	db := NewDB(primary).WithReplica(down)
	q, err := db.ManualQueue(ctx, QueueQuery{Limit: 10}, time.Now())
	if err != nil || q.Items == nil {
		t.Fatalf("manual queue with the replica failing: %+v, %v", q, err)
	}
	if st := down.Status(); st.Serving != ServingPrimary || st.Up {
		t.Errorf("after a failed query: %+v, want the primary serving", st)
	}
	if _, err := db.SLO(ctx, time.Hour, "", time.Now()); err != nil {
		t.Errorf("SLO with the replica down: %v", err)
	}
	// Refused arguments are not the replica's fault: no retry, no change.
	down.mu.Lock()
	down.st = ReplicaStatus{Serving: ServingReplica, Up: true}
	down.mu.Unlock()
	if _, err := db.ManualQueue(ctx, QueueQuery{Limit: MaxLimit + 1}, time.Now()); err == nil {
		t.Error("a limit above MaxLimit was accepted")
	}
	if st := down.Status(); st.Serving != ServingReplica {
		t.Errorf("a refused query moved the reads: %+v", st)
	}
}
