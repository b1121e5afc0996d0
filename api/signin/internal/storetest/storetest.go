// Package storetest is the conformance suite of signin.Store: every store
// (signin.MemoryStore, pgsession.Store) runs it.
package storetest

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/reviewledger/reviewledger/api/signin"
)

// Run checks the store newStore returns; stores of one call share their
// data as processes on one database do (newStore(t) twice on one t).
func Run(t *testing.T, newStore func(t *testing.T) (a, b signin.Store)) {
	t.Run("key shared", func(t *testing.T) {
		a, b := newStore(t)
		ctx := context.Background()
		ka, err := a.Key(ctx)
		if err != nil || len(ka) < 32 {
			t.Fatalf("key %x, %v", ka, err)
		}
		kb, err := b.Key(ctx)
		if err != nil || !bytes.Equal(ka, kb) {
			t.Fatalf("the stores' keys differ: %x, %x (%v)", ka, kb, err)
		}
		if again, _ := a.Key(ctx); !bytes.Equal(again, ka) {
			t.Fatal("the key changed")
		}
	})
	t.Run("records", func(t *testing.T) {
		a, b := newStore(t)
		ctx := context.Background()
		t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
		r := signin.Record{Key: "k1", ID: "p1", Subject: "sub", Name: "Jane", Roles: []string{"auditor", "moderator"}, CSRF: "c",
			RefreshToken: "rt", IDToken: "it", Created: t0, CheckAt: t0.Add(5 * time.Minute), Expiry: t0.Add(time.Hour)}
		if err := a.Create(ctx, r); err != nil {
			t.Fatal(err)
		}
		got, err := b.Get(ctx, "k1")
		if err != nil || !equal(got, r) {
			t.Fatalf("got %+v, %v; want %+v", got, err, r)
		}
		if _, err := b.Get(ctx, "nope"); !errors.Is(err, signin.ErrNoSession) {
			t.Fatalf("unknown key: %v", err)
		}
		r.Roles, r.RefreshToken, r.CheckAt, r.Expiry = nil, "rt2", t0.Add(10*time.Minute), time.Time{}
		if err := b.Update(ctx, r); err != nil {
			t.Fatal(err)
		}
		if got, err = a.Get(ctx, "k1"); err != nil || !equal(got, r) {
			t.Fatalf("after update %+v, %v; want %+v", got, err, r)
		}
		old := r
		old.Key, old.Created = "k0", t0.Add(-time.Hour)
		if err := a.Create(ctx, old); err != nil {
			t.Fatal(err)
		}
		if err := b.Sweep(ctx, t0.Add(-time.Minute)); err != nil {
			t.Fatal(err)
		}
		if _, err := a.Get(ctx, "k0"); !errors.Is(err, signin.ErrNoSession) {
			t.Fatalf("swept session: %v", err)
		}
		if err := a.Delete(ctx, "k1"); err != nil {
			t.Fatal(err)
		}
		if err := a.Delete(ctx, "k1"); err != nil {
			t.Fatalf("deleting twice: %v", err)
		}
		if _, err := b.Get(ctx, "k1"); !errors.Is(err, signin.ErrNoSession) {
			t.Fatalf("deleted session: %v", err)
		}
		if err := b.Update(ctx, r); !errors.Is(err, signin.ErrNoSession) {
			t.Fatalf("update of a deleted session: %v", err)
		}
	})
}

func equal(a, b signin.Record) bool {
	return a.Key == b.Key && a.ID == b.ID && a.Subject == b.Subject && a.Name == b.Name && slices.Equal(a.Roles, b.Roles) &&
		a.CSRF == b.CSRF && a.RefreshToken == b.RefreshToken && a.IDToken == b.IDToken &&
		a.Created.Equal(b.Created) && a.CheckAt.Equal(b.CheckAt) && a.Expiry.Equal(b.Expiry)
}
