package projections

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reviewledger/reviewledger/domain"
)

// ErrInvalidQuery is wrapped, inside a *domain.FieldError naming the
// parameter, by queries refusing their arguments.
var ErrInvalidQuery = errors.New("invalid query")

// MaxLimit is the largest page a query returns.
const MaxLimit = 1000

// DB answers queries on the read models. It is safe for concurrent use.
type DB struct {
	pool *pgxpool.Pool
	// replica, when set, serves the read-model queries while it is well
	// (WithReplica); pool is the primary.
	replica *Replica
	// objectives are the classes' SLO objectives; a class not in it has
	// domain.DefaultObjective.
	objectives map[string]float64
	// minutesOnly reads every SLO window from the minute tables, none from
	// the hourly rollups: what the tests compare the rollups with.
	minutesOnly bool
}

// NewDB returns a DB on pool, which must hold the migrated schema.
func NewDB(pool *pgxpool.Pool) *DB { return &DB{pool: pool} }

// WithObjectives returns a DB judging error budgets by the objectives
// given per class (domain.ClassPolicy.SLOObjective); classes not named
// have domain.DefaultObjective.
func (db *DB) WithObjectives(objectives map[string]float64) *DB {
	c := *db
	c.objectives = maps.Clone(objectives)
	return &c
}

// Objectives returns the objectives of a policy's classes, for
// WithObjectives.
func Objectives(p domain.Policy) map[string]float64 {
	out := make(map[string]float64, len(p.Classes))
	for name, c := range p.Classes {
		out[name] = c.SLOObjective()
	}
	return out
}

func (db *DB) objective(class string) float64 {
	if o, ok := db.objectives[class]; ok {
		return o
	}
	return domain.DefaultObjective
}

// classes returns the classes of the objectives and those seen, sorted.
func (db *DB) classes(seen []string) []string {
	out := slices.Collect(maps.Keys(db.objectives))
	for _, c := range seen {
		if !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	slices.Sort(out)
	return out
}

func invalid(field, format string, args ...any) error {
	return &domain.FieldError{Field: field, Reason: fmt.Sprintf(format, args...), Err: ErrInvalidQuery}
}

func checkLimit(limit int) error {
	if limit < 1 || limit > MaxLimit {
		return invalid("limit", "must be between 1 and %d, got %d", MaxLimit, limit)
	}
	return nil
}

// seconds returns d in seconds, rounded to milliseconds, never negative.
func seconds(d time.Duration) float64 {
	return math.Max(0, math.Round(d.Seconds()*1000)/1000)
}
