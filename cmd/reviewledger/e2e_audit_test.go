package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/reviewledger/reviewledger/eventstore/clock/clocktest"
)

// TestE2EAudit: an auditor reads a review's history over HTTP; the CLI
// verifies the ledger, replays a review and rebuilds the read models with
// the same result; an event altered in SQL is found and named.
func TestE2EAudit(t *testing.T) {
	t.Parallel()
	// A short claim lease, to see one lapse.
	srv := newE2EServer(t, map[string]string{"REVIEWLEDGER_CLAIM_LEASE": "1s"})

	const (
		accepted = "e2e-audit-accepted"
		decided  = "e2e-audit-decided"
		waiting  = "e2e-audit-waiting"
	)
	srv.Provider.script(decided, status(http.StatusServiceUnavailable, ""), status(http.StatusBadRequest, ""))
	srv.Provider.script(waiting, status(http.StatusForbidden, ""))
	for _, id := range []string{accepted, decided, waiting} {
		srv.submit(t, id, "e2e_fast", content(id))
	}
	for _, id := range []string{accepted, decided, waiting} {
		srv.waitSettled(t, id)
	}
	v := srv.waitSettled(t, decided)
	srv.expect(t, http.StatusOK, http.MethodPost, "/v1/reviews/"+decided+"/decision", tokModerator,
		map[string]any{"state": "rejected", "note": "audit trail", "expected_version": v.Version})
	srv.waitQueued(t, waiting, "e2e_fast")
	srv.waitUnqueued(t, decided, "e2e_fast")

	t.Run("events in revision order", func(t *testing.T) {
		evs := srv.events(t, decided)
		want := []string{"Submitted", "AttemptStarted", "AttemptTimedOut", "AttemptStarted", "AttemptTimedOut", "Escalated", "ManualDecisionRecorded"}
		if got := eventTypes(evs); !reflect.DeepEqual(got, want) {
			t.Fatalf("events %v, want %v", got, want)
		}
		for i, e := range evs {
			var data map[string]any
			if e.Version != uint64(i) || e.RecordedAt.IsZero() || json.Unmarshal(e.Data, &data) != nil || data["review_id"] != decided {
				t.Errorf("event %d: version %d, recorded_at %s, data %s", i, e.Version, e.RecordedAt, e.Data)
			}
			if i > 0 && e.RecordedAt.Before(evs[i-1].RecordedAt) {
				t.Errorf("event %d recorded before event %d", i, i-1)
			}
			if strings.Contains(string(e.Data), contentMarker) {
				t.Errorf("event %d carries the content: %s", i, e.Data)
			}
		}
		if evs[6].field("moderator") != "mona" || evs[6].field("note") != "audit trail" {
			t.Errorf("decision event %s", evs[6].Data)
		}
	})

	t.Run("migrate on a migrated database", func(t *testing.T) {
		if code, out, errOut := srv.cli(t, "migrate"); code != 0 {
			t.Errorf("migrate: exit %d\n%s%s", code, out, errOut)
		}
	})

	t.Run("audit verify passes on an intact ledger", func(t *testing.T) {
		code, out, errOut := srv.cli(t, "audit", "verify")
		if code != 0 {
			t.Fatalf("audit verify: exit %d\n%s%s", code, out, errOut)
		}
		if strings.Contains(out, "DAMAGED") {
			t.Errorf("audit verify on an intact ledger: %s", out)
		}
	})

	t.Run("replay prints the timeline", func(t *testing.T) {
		code, out, errOut := srv.cli(t, "replay", decided)
		if code != 0 {
			t.Fatalf("replay: exit %d\n%s%s", code, out, errOut)
		}
		for _, want := range []string{decided, "Submitted", "AttemptTimedOut", "provider_unavailable", "Escalated", "ManualDecisionRecorded", "mona", "rejected"} {
			if !strings.Contains(out, want) {
				t.Errorf("replay output lacks %q:\n%s", want, out)
			}
		}
		if strings.Contains(out, contentMarker) {
			t.Errorf("replay prints the content:\n%s", out)
		}
		if code, _, _ := srv.cli(t, "replay", "e2e-audit-unknown"); code == 0 {
			t.Error("replay of an unknown review exits 0")
		}
	})

	t.Run("projections rebuild changes nothing", func(t *testing.T) {
		slo := func() map[string]any {
			return sloComparable(decode[map[string]any](t, srv.expect(t, http.StatusOK, http.MethodGet, "/v1/slo?window=1h", tokAuditor, nil)))
		}
		queue := func() []queueItem {
			items := srv.queue(t, "?limit=1000")
			for i := range items {
				items[i].AgeSeconds = 0
			}
			return items
		}
		// Each read model catches up on its own: wait until all have.
		var beforeSLO map[string]any
		clocktest.EventuallyShows(t, "the SLO to show every review", func() (bool, string) {
			beforeSLO = slo()
			q, _ := beforeSLO["manual_queue"].(map[string]any)
			return q["depth"] == float64(1) && beforeSLO["total"] == float64(3) && beforeSLO["escalated"] == float64(2), fmt.Sprint(beforeSLO)
		})
		beforeQueue := queue()
		code, out, errOut := srv.cli(t, "projections", "rebuild")
		if code != 0 {
			t.Fatalf("projections rebuild: exit %d\n%s%s", code, out, errOut)
		}
		if after := slo(); !reflect.DeepEqual(after, beforeSLO) {
			t.Errorf("SLO after the rebuild %v\nbefore %v", after, beforeSLO)
		}
		if after := queue(); !reflect.DeepEqual(after, beforeQueue) {
			t.Errorf("queue after the rebuild %+v\nbefore %+v", after, beforeQueue)
		}
		if code, out, errOut := srv.cli(t, "projections", "rebuild", "manual_queue"); code != 0 {
			t.Errorf("projections rebuild manual_queue: exit %d\n%s%s", code, out, errOut)
		}
		if after := queue(); !reflect.DeepEqual(after, beforeQueue) {
			t.Errorf("queue after rebuilding it alone %+v\nbefore %+v", after, beforeQueue)
		}
		if code, _, _ := srv.cli(t, "projections", "rebuild", "no_such_projection"); code == 0 {
			t.Error("projections rebuild of an unknown projection exits 0")
		}
		if code, out, _ := srv.cli(t, "projections", "status"); code != 0 || !strings.Contains(out, "manual_queue") {
			t.Errorf("projections status: exit %d\n%s", code, out)
		}
	})

	// After the rebuild: a lapsing claim would make its snapshots differ.
	t.Run("a lapsed claim can be taken over", func(t *testing.T) {
		srv.expect(t, http.StatusOK, http.MethodPost, "/v1/manual-queue/"+waiting+"/claim", tokModerator, nil)
		clocktest.EventuallyShows(t, "the claim to lapse", func() (bool, string) {
			res := srv.call(t, http.MethodPost, "/v1/manual-queue/"+waiting+"/claim", tokModerator2, nil)
			return res.Status == http.StatusOK, res.String()
		})
		// The queue is a projection of the claims: current within about
		// a second (docs/contracts.md §2).
		srv.waitQueued(t, waiting, "e2e_fast")
		clocktest.EventuallyShows(t, "the queue to show max's claim", func() (bool, string) {
			it, _ := queued(srv.queue(t, "?content_class=e2e_fast&limit=1000"), waiting)
			return it.ClaimedBy != nil && *it.ClaimedBy == "max", fmt.Sprintf("%+v", it)
		})
	})

	t.Run("an altered event is found and named", func(t *testing.T) {
		ctx := context.Background()
		conn, err := pgx.Connect(ctx, srv.DatabaseURL)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		tag, err := conn.Exec(ctx, `UPDATE event
			SET data = convert_to(replace(convert_from(data, 'UTF8'), '"rejected"', '"accepted"'), 'UTF8')
			WHERE stream = $1 AND type = 'ManualDecisionRecorded'`, "review-"+decided)
		if err != nil || tag.RowsAffected() != 1 {
			t.Fatalf("alter the decision: %v (%d rows)", err, tag.RowsAffected())
		}
		code, out, errOut := srv.cli(t, "audit", "verify")
		if code == 0 {
			t.Fatalf("audit verify exits 0 after an event was altered:\n%s%s", out, errOut)
		}
		if !strings.Contains(out+errOut, decided) {
			t.Errorf("audit verify does not name %s:\n%s%s", decided, out, errOut)
		}
		for _, intact := range []string{accepted, waiting} {
			if strings.Contains(out+errOut, intact) {
				t.Errorf("audit verify names the intact review %s:\n%s%s", intact, out, errOut)
			}
		}
		if code, out, errOut := srv.cli(t, "audit", "verify", "--review", decided); code == 0 || !strings.Contains(out+errOut, decided) {
			t.Errorf("audit verify --review %s (altered): exit %d\n%s%s", decided, code, out, errOut)
		}
		if code, out, errOut := srv.cli(t, "audit", "verify", "--review", accepted); code != 0 {
			t.Errorf("audit verify --review %s (intact): exit %d\n%s%s", accepted, code, out, errOut)
		}
	})
}
