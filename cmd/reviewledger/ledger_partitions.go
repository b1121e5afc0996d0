package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reviewledger/reviewledger/eventstore/ledger"
	"github.com/reviewledger/reviewledger/eventstore/pgstore"
)

// LedgerCmd operates the PostgreSQL ledger's partitions: old events are
// archived by detaching whole partitions (docs/operations.md, "Archiving
// old events").
type LedgerCmd struct {
	Partitions LedgerPartitionsCmd `cmd:"" help:"List the ledger's partitions: seq bounds, events, bytes, first and last events' times."`
	Detach     LedgerDetachCmd     `cmd:"" help:"Detach the partitions wholly below a seq (never the one appends go to), leaving them as tables to dump and drop."`
}

// LedgerPartitionsCmd lists the ledger's partitions.
type LedgerPartitionsCmd struct {
	Config `embed:""`
	Store  StoreConfig `embed:""`
}

// Run prints one line per partition, in seq order.
func (c *LedgerPartitionsCmd) Run(ctx context.Context, out io.Writer) error {
	pool, err := openPartitioned(ctx, &c.Config, c.Store)
	if err != nil {
		return err
	}
	defer pool.Close()
	parts, err := pgstore.Partitions(ctx, pool)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PARTITION\tSEQ FROM\tSEQ TO\tEVENTS\tBYTES\tFIRST EVENT\tLAST EVENT\tSTATE")
	for _, p := range parts {
		from, state := fmt.Sprint(p.Lower), "attached"
		if p.First {
			from = "-"
		}
		if p.Detaching {
			state = "detaching (finish with ledger detach)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%s\t%s\t%s\n", p.Name, from, p.Upper, p.Rows, p.Bytes, stamp(p.Oldest), stamp(p.Newest), state)
	}
	return tw.Flush()
}

// stamp formats an event's time, "-" for none.
func stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// LedgerDetachCmd detaches old partitions. The policy snapshots they hold
// are copied into the live partition first, since later reviews name them;
// a partition holding the first events of streams that go on later is
// refused.
type LedgerDetachCmd struct {
	Config `embed:""`
	Store  StoreConfig `embed:""`
	Before int64       `name:"before" required:"" placeholder:"SEQ" help:"Detach every partition whose seq range ends at or below SEQ (see ledger partitions)."`
}

// Validate names the flag at fault.
func (c *LedgerDetachCmd) Validate() error {
	if c.Before <= 0 {
		return fmt.Errorf("--before: must be a seq above 0, got %d", c.Before)
	}
	return nil
}

// Run detaches the partitions and prints what to do with each.
func (c *LedgerDetachCmd) Run(ctx context.Context, out io.Writer) error {
	pool, err := openPartitioned(ctx, &c.Config, c.Store)
	if err != nil {
		return err
	}
	defer pool.Close()
	_, err = pgstore.Detach(ctx, pool, c.Before, pgstore.DetachOptions{
		Keep: []string{ledger.PolicyStreamPrefix},
		Done: func(name string) {
			fmt.Fprintf(out, "detached %s: archive it (pg_dump -t %s), then DROP TABLE %s\n", name, name, name)
		},
	})
	switch {
	case errors.Is(err, pgstore.ErrNothingToDetach):
		_, err = fmt.Fprintf(out, "nothing to detach: no partition ends at or below seq %d and below the next seq\n", c.Before)
	case errors.Is(err, pgstore.ErrStreamsContinue):
		err = fmt.Errorf("refused: %w (their first events would leave the ledger; detach below their start)", err)
	}
	return err
}

// openPartitioned opens the migrated database of a ledger kept in
// PostgreSQL, the one backend with partitions.
func openPartitioned(ctx context.Context, cfg *Config, sc StoreConfig) (*pgxpool.Pool, error) {
	if sc.Backend != backendPostgres {
		return nil, fmt.Errorf("REVIEWLEDGER_EVENTSTORE: the ledger is in %s, which has no partitions", sc.Backend)
	}
	return openMigrated(ctx, cfg)
}
