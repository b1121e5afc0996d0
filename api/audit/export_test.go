package audit

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"
)

// AnchorPage is a page of anchors as stored: its first_id and the review
// IDs it holds, in their order in the page.
type AnchorPage struct {
	First string
	IDs   []string
	Marks map[string]Mark
}

// AnchorPages returns every page of anchors, in the order of first_id.
func AnchorPages(ctx context.Context, pool *pgxpool.Pool) ([]AnchorPage, error) {
	rows, _ := pool.Query(ctx, pagesAll+` ORDER BY first_id`)
	var pages []AnchorPage
	err := eachPage(ctx, rows, func(first, id string, m Mark) error {
		if len(pages) == 0 || pages[len(pages)-1].First != first {
			pages = append(pages, AnchorPage{First: first, Marks: map[string]Mark{}})
		}
		p := &pages[len(pages)-1]
		p.IDs = append(p.IDs, id)
		p.Marks[id] = m
		return nil
	})
	return pages, err
}
