package ctl

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// table is text/tabwriter with the errors kept for the end.
type table struct {
	w   *tabwriter.Writer
	err error
}

func newTable(out io.Writer) *table {
	return &table{w: tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)}
}

func (t *table) row(cells ...string) {
	if t.err == nil {
		// A tab or newline inside a cell would break the columns.
		for i, c := range cells {
			cells[i] = strings.NewReplacer("\t", " ", "\n", " ").Replace(c)
		}
		_, t.err = fmt.Fprintln(t.w, strings.Join(cells, "\t"))
	}
}

func (t *table) flush() error {
	if t.err != nil {
		return fmt.Errorf("writing the table: %w", t.err)
	}
	if err := t.w.Flush(); err != nil {
		return fmt.Errorf("writing the table: %w", err)
	}
	return nil
}

func writeJSON(out io.Writer, v any) error {
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("writing JSON: %w", err)
	}
	return nil
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
