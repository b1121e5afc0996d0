// Command reviewledger is the review ledger service: one binary whose
// subcommands run the server, migrate the database and operate the ledger.
//
// Configuration comes from the environment (docs/contracts.md §1), read once through
// the CLI parser; every variable has a mirroring flag. See README.md.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/alecthomas/kong"
)

// version is set at build time: -ldflags "-X main.version=v1.2.3".
var version = "dev"

// CLI is the command line. To add a command, add one field here and put the
// command's type, with its Run method, in a file of its own named after it
// (serve.go, migrate.go, ...). A command that needs the configuration embeds
// Config as an `embed:""` field, as ServeCmd does; the parser then reads it
// from the environment and flags, and runs Config.Validate before the
// command. Run methods may take any of the bound values: context.Context,
// *slog.Logger, and an io.Writer for output.
type CLI struct {
	Serve       ServeCmd       `cmd:"" help:"Apply pending migrations and serve the API."`
	Migrate     MigrateCmd     `cmd:"" help:"Apply pending database migrations and exit."`
	Projections ProjectionsCmd `cmd:"" help:"Rebuild read models from the ledger, or print their progress."`
	Audit       AuditCmd       `cmd:"" help:"Verify that the ledger's history is intact."`
	Replay      ReplayCmd      `cmd:"" help:"Print a review's timeline, the state rebuilt from it and its conflicting completions."`
	Ledger      LedgerCmd      `cmd:"" help:"List the ledger's partitions, or detach old ones for archiving."`
	Deliveries  DeliveriesCmd  `cmd:"" help:"List the decision webhooks' failing deliveries, or redeliver them."`
	Capacity    CapacityCmd    `cmd:"" help:"Estimate the workers a review load needs (Little's law, retries counted)."`
	Alerts      AlertsCmd      `cmd:"" help:"Print Prometheus rules for the policy's SLOs: error ratios, burn-rate alerts, queue age, retry budget."`
	Version     VersionCmd     `cmd:"" help:"Print the version and exit."`
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run parses args and the environment, validates the configuration and runs
// the chosen command. It returns the process exit code: 0 on success, 2 for
// a usage or configuration error, 1 when the command fails. Either error is
// one line on stderr naming what failed (output.go).
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var cli CLI
	exit := -1
	parser, err := kong.New(&cli,
		kong.Name("reviewledger"),
		kong.Description("Durable, auditable moderation reviews between a platform and its provider."),
		kong.Writers(stdout, stderr),
		kong.Exit(func(code int) { exit = code }),
	)
	if err != nil {
		fmt.Fprintln(stderr, "reviewledger:", err)
		return 2
	}
	kctx, err := parser.Parse(args)
	if exit >= 0 { // --help
		return exit
	}
	if err != nil {
		// Configuration errors (Config.Validate) come here too.
		fmt.Fprintln(stderr, "reviewledger:", err)
		return 2
	}
	name := commandName(kctx.Command())
	logger := newLogger(name, stderr)
	slog.SetDefault(logger)
	kctx.BindTo(ctx, (*context.Context)(nil))
	kctx.BindTo(stdout, (*io.Writer)(nil))
	kctx.Bind(logger)
	if err := kctx.Run(); err != nil {
		if errors.Is(err, context.Canceled) && ctx.Err() != nil {
			return 0 // stopped by a signal
		}
		fmt.Fprintln(stderr, failure(name, err))
		return 1
	}
	return 0
}

// kongParse parses args into cli without running anything; tests use it.
func kongParse(cli *CLI, args ...string) (*kong.Context, error) {
	parser, err := kong.New(cli, kong.Name("reviewledger"))
	if err != nil {
		return nil, err
	}
	return parser.Parse(args)
}
