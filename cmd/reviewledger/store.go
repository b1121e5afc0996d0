package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/reviewledger/reviewledger/eventstore"
	"github.com/reviewledger/reviewledger/eventstore/esdbstore"
	"github.com/reviewledger/reviewledger/eventstore/pgstore"
)

// Event store backends.
const (
	backendPostgres  = "postgres"
	backendKurrentDB = "kurrentdb"
)

// StoreConfig selects the ledger's backend. PostgreSQL is the default; the
// read models and the runner's tables live in PostgreSQL either way.
type StoreConfig struct {
	Backend string `name:"eventstore" env:"REVIEWLEDGER_EVENTSTORE" default:"postgres" help:"Ledger backend: postgres or kurrentdb."`
	URL     string `name:"eventstore-url" env:"REVIEWLEDGER_EVENTSTORE_URL" help:"EventStoreDB/KurrentDB connection string, for --eventstore=kurrentdb."`
}

// Validate names the setting at fault.
func (c StoreConfig) Validate() error {
	switch c.Backend {
	case backendPostgres:
		return nil
	case backendKurrentDB:
		if c.URL == "" {
			return fmt.Errorf("REVIEWLEDGER_EVENTSTORE_URL: required with REVIEWLEDGER_EVENTSTORE=kurrentdb")
		}
		if err := (&esdbstore.Config{URL: c.URL}).Validate(); err != nil {
			return fmt.Errorf("REVIEWLEDGER_EVENTSTORE_URL: %w", err)
		}
		return nil
	default:
		return fmt.Errorf("REVIEWLEDGER_EVENTSTORE: must be postgres or kurrentdb, got %q", c.Backend)
	}
}

// open connects the configured backend. For PostgreSQL it also registers a
// gauge of how far long-running transactions hold back the global order.
func (c StoreConfig) open(ctx context.Context, dbs pools, reg prometheus.Registerer, log *slog.Logger) (eventstore.Store, func(), error) {
	if c.Backend == backendKurrentDB {
		s, err := esdbstore.Open(ctx, c.URL)
		if err != nil {
			return nil, nil, fmt.Errorf("REVIEWLEDGER_EVENTSTORE_URL: %w", err)
		}
		return s, s.Close, nil
	}
	s := pgstore.New(dbs.Main, pgstore.Config{Logger: log, Sessions: dbs.Sessions})
	if reg != nil {
		stall := func() pgstore.Stall {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			st, err := s.Stall(ctx)
			if err != nil {
				return pgstore.Stall{HeldBack: -1, Oldest: -time.Second}
			}
			return st
		}
		reg.MustRegister(
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "reviewledger_eventstore_held_back_events",
				Help: "Events committed but not yet readable in the global order because an older transaction is still running (-1: measurement failed).",
			}, func() float64 { return float64(stall().HeldBack) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "reviewledger_eventstore_held_back_seconds",
				Help: "Age of the oldest event held back from the global order: the delay projections and subscribers see now (-1: measurement failed).",
			}, func() float64 { return stall().Oldest.Seconds() }),
		)
	}
	return s, s.Close, nil
}
