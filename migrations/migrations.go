// Package migrations holds the database schema as versioned SQL files embedded
// in the binary, and a small migrator that applies them.
//
// Files are named NNNN_name.up.sql and applied in numeric order. Each one runs
// in its own transaction together with the row recording its version in
// reviewledger_migration, so a migration is applied entirely or not at all.
// A whole run holds a PostgreSQL advisory lock: two processes starting at
// once never apply the same migration twice, and applying again is a no-op.
//
// Version ranges are reserved per component so files never collide:
// 0001–0009 event store, 0010–0019 review engine, 0020–0029 projections,
// 0030–0039 HTTP API, 0050–0059 audit checkpoints and operations.
// Migrations must not name a schema, so that they apply to whatever schema
// the connection's search_path selects.
package migrations

import (
	"embed"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"slices"
	"strconv"
)

//go:embed *.sql
var files embed.FS

// Migration is one versioned SQL file.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

var fileName = regexp.MustCompile(`^(\d{4})_([a-z0-9_]+)\.up\.sql$`)

// All returns every embedded migration in version order.
func All() ([]Migration, error) { return Load(files) }

// Load reads the migrations in the top directory of fsys, in version order.
// It refuses files whose names do not follow NNNN_name.up.sql and versions
// used twice.
func Load(fsys fs.FS) ([]Migration, error) {
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return nil, fmt.Errorf("migrations: %w", err)
	}
	var all []Migration
	seen := make(map[int]string)
	for _, e := range entries {
		if e.IsDir() || path.Ext(e.Name()) != ".sql" {
			continue
		}
		m := fileName.FindStringSubmatch(e.Name())
		if m == nil {
			return nil, fmt.Errorf("migrations: %s: name must be NNNN_name.up.sql", e.Name())
		}
		version, _ := strconv.Atoi(m[1])
		if version == 0 {
			return nil, fmt.Errorf("migrations: %s: versions start at 0001", e.Name())
		}
		if other, dup := seen[version]; dup {
			return nil, fmt.Errorf("migrations: %s and %s share version %d", other, e.Name(), version)
		}
		seen[version] = e.Name()
		sql, err := fs.ReadFile(fsys, e.Name())
		if err != nil {
			return nil, fmt.Errorf("migrations: %w", err)
		}
		all = append(all, Migration{Version: version, Name: m[2], SQL: string(sql)})
	}
	slices.SortFunc(all, func(a, b Migration) int { return a.Version - b.Version })
	return all, nil
}
