package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/reviewledger/reviewledger/api/notify"
	"github.com/reviewledger/reviewledger/domain"
)

// DeliveriesCmd operates the decision webhooks' deliveries, as the admin
// routes GET /v1/admin/deliveries and POST .../redeliver do.
type DeliveriesCmd struct {
	List      DeliveriesListCmd      `cmd:"" help:"List the decision webhooks' deliveries, failing ones by default."`
	Redeliver DeliveriesRedeliverCmd `cmd:"" help:"Attempt deliveries again at once, with a new retry window and the same webhook-id."`
}

// DeliveriesListCmd prints deliveries, oldest first.
type DeliveriesListCmd struct {
	Config `embed:""`
	State  string `name:"state" default:"failing" help:"failing (retrying or failed), pending, retrying, failed, delivered, or all."`
	Review string `name:"review" help:"Only this review's deliveries."`
	Limit  int    `name:"limit" default:"100" help:"At most this many (1 to 1000)."`
	JSON   bool   `name:"json" help:"Print the deliveries as the admin route's JSON."`
}

func (c *DeliveriesListCmd) query() notify.Query {
	q := notify.Query{State: c.State, ReviewID: c.Review, Limit: c.Limit}
	if q.State == "all" {
		q.State = ""
	}
	return q
}

// flags maps the query's fields to the command's flags.
var deliveryFlags = map[string]string{"state": "--state", "review_id": "--review", "limit": "--limit"}

// Validate names the flag at fault.
func (c *DeliveriesListCmd) Validate() error {
	q := c.query()
	if q.Limit == 0 {
		return errors.New("--limit: must be between 1 and 1000, got 0")
	}
	err := q.Validate()
	var fe *domain.FieldError
	if errors.As(err, &fe) {
		return fmt.Errorf("%s: %s", deliveryFlags[fe.Field], fe.Reason)
	}
	return err
}

// Run prints one line per delivery, or the JSON.
func (c *DeliveriesListCmd) Run(ctx context.Context, out io.Writer) error {
	return withDeliveries(ctx, c.DatabaseURL, func(db *notify.DB) error {
		ds, err := db.List(ctx, c.query())
		if err != nil {
			return err
		}
		if c.JSON {
			if ds == nil {
				ds = []notify.Delivery{}
			}
			return json.NewEncoder(out).Encode(map[string]any{"deliveries": ds})
		}
		tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tREVIEW\tVERSION\tTYPE\tSTATE\tATTEMPTS\tCREATED\tNEXT ATTEMPT\tLAST ERROR")
		for _, d := range ds {
			next, last := "-", "-"
			if d.NextAttemptAt != nil {
				next = d.NextAttemptAt.Format(time.RFC3339)
			}
			if d.LastError != nil {
				last = *d.LastError
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%d\t%s\t%s\t%s\n", d.ID, d.ReviewID, d.Version, d.EventType, d.State,
				d.Attempts, d.CreatedAt.Format(time.RFC3339), next, last)
		}
		return tw.Flush()
	})
}

// DeliveriesRedeliverCmd makes deliveries due now.
type DeliveriesRedeliverCmd struct {
	Config `embed:""`
	IDs    []string `arg:"" optional:"" name:"id" help:"Deliveries to attempt again (their webhook-ids)."`
	Failed bool     `name:"failed" help:"Every delivery given up at the end of its retry window."`
}

// Validate wants IDs or --failed, not both.
func (c *DeliveriesRedeliverCmd) Validate() error {
	if (len(c.IDs) == 0) == !c.Failed {
		return errors.New("name the deliveries to redeliver, or --failed for every given-up one")
	}
	return nil
}

// Run redelivers and prints what it did.
func (c *DeliveriesRedeliverCmd) Run(ctx context.Context, out io.Writer) error {
	return withDeliveries(ctx, c.DatabaseURL, func(db *notify.DB) error {
		now := time.Now()
		if c.Failed {
			n, err := db.RedeliverFailed(ctx, now)
			if err != nil {
				return err
			}
			fmt.Fprintf(out, "%d given-up deliveries due again\n", n)
			return nil
		}
		var errs []error
		for _, id := range c.IDs {
			d, err := db.Redeliver(ctx, id, now)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			fmt.Fprintf(out, "%s (review %s version %d) due again after %d attempts\n", d.ID, d.ReviewID, d.Version, d.Attempts)
		}
		return errors.Join(errs...)
	})
}

// withDeliveries runs fn on the deliveries of DATABASE_URL, which must be
// migrated (it is never migrated here).
func withDeliveries(ctx context.Context, databaseURL string, fn func(*notify.DB) error) error {
	pool, err := openMigrated(ctx, &Config{DatabaseURL: databaseURL})
	if err != nil {
		return err
	}
	defer pool.Close()
	return fn(notify.NewDB(pool))
}
