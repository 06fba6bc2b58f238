package perf

import (
	"cmp"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"
)

// Kind is what a figure measures; less is better for every kind but Rate, of which more is,
// and Factor, which compares two figures of one daemon and is neither.
type Kind string

// Kinds of figures.
const (
	Duration Kind = "seconds"
	Memory   Kind = "bytes"
	Rate     Kind = "bits/s"
	Factor   Kind = "factor"
)

// Value is one measurement, or the median of several.
type Value struct {
	// N is in seconds (Duration), bytes (Memory), bits per second (Rate) or a plain number
	// (Factor).
	N float64 `json:"n"`
	// AtLeast marks a bound, not a measurement: it timed out after N.
	AtLeast bool `json:"at_least,omitempty"`
	// Missing says why there is no value at all (the daemon failed); N is then meaningless.
	Missing string `json:"missing,omitempty"`
}

// seconds is a measured duration.
func seconds(d time.Duration) Value { return Value{N: d.Seconds()} }

// timedOut is the bound of a measurement that timed out after d.
func timedOut(d time.Duration) Value { return Value{N: d.Seconds(), AtLeast: true} }

// missing is a value that could not be measured.
func missing(format string, args ...any) Value { return Value{Missing: fmt.Sprintf(format, args...)} }

// sum is a+b, missing unless both are measurements.
func sum(a, b Value) Value {
	if a.Missing != "" || b.Missing != "" || a.AtLeast || b.AtLeast {
		return missing("no sum")
	}
	return Value{N: a.N + b.N}
}

// ratio is a/b, missing unless both are measurements.
func ratio(a, b Value) Value {
	if a.Missing != "" || b.Missing != "" || a.AtLeast || b.AtLeast || b.N <= 0 {
		return missing("no ratio")
	}
	return Value{N: a.N / b.N}
}

// compareValues orders values best first: measurements, then bounds, then missing ones.
func compareValues(a, b Value) int {
	rank := func(v Value) int {
		switch {
		case v.Missing != "":
			return 2
		case v.AtLeast:
			return 1
		}
		return 0
	}
	if c := cmp.Compare(rank(a), rank(b)); c != 0 {
		return c
	}
	return cmp.Compare(a.N, b.N)
}

// median is the middle one of the samples (the upper middle of an even count); a timeout or
// a failure counts as worse than any measurement.
func median(samples []Value) Value {
	if len(samples) == 0 {
		return missing("not measured")
	}
	s := slices.Clone(samples)
	slices.SortFunc(s, compareValues)
	return s[len(s)/2]
}

// Format renders the value for the table.
func (v Value) Format(k Kind) string {
	if v.Missing != "" {
		return "— (" + v.Missing + ")"
	}
	var s string
	switch k {
	case Memory:
		s = fmt.Sprintf("%.1f MiB", v.N/(1<<20))
	case Rate:
		if v.N >= 10e9 {
			s = fmt.Sprintf("%.1f Gbit/s", v.N/1e9)
		} else {
			s = fmt.Sprintf("%.2f Gbit/s", v.N/1e9)
		}
	case Factor:
		s = times(v.N)
	default:
		switch ms := v.N * 1000; {
		case ms < 10:
			s = fmt.Sprintf("%.2f ms", ms)
		case ms < 1000:
			s = fmt.Sprintf("%.1f ms", ms)
		case ms < 10000:
			s = fmt.Sprintf("%.2f s", v.N)
		default:
			s = fmt.Sprintf("%.1f s", v.N)
		}
	}
	if v.AtLeast {
		return "> " + s
	}
	return s
}

// Ratio compares weftd's value of a figure of kind k with flanneld's: weftd/flanneld and a
// word, "ahead" when weftd is at least 5% better (needs less, or for a Rate carries more),
// "behind" when it is at least 5% worse, else "even". Bounds make the ratio a bound too; it
// is "" when a value is missing, and for a Factor, which has no better side.
func Ratio(k Kind, flanneld, weftd Value) string {
	if k == Factor || flanneld.Missing != "" || weftd.Missing != "" || flanneld.AtLeast && weftd.AtLeast {
		return ""
	}
	var r float64
	switch {
	case flanneld.N > 0:
		r = weftd.N / flanneld.N
	case weftd.N == 0:
		r = 1
	default:
		r = math.Inf(1)
	}
	better, worse := r < 0.95, r > 1.05
	if k == Rate {
		better, worse = worse, better
	}
	word := "even"
	switch {
	case better:
		word = "ahead"
	case worse:
		word = "behind"
	}
	num := times(r)
	switch {
	case weftd.AtLeast: // weftd is at least this far behind
		return "> " + num + " behind"
	case flanneld.AtLeast: // and weftd at least this far ahead
		return "< " + num + " ahead"
	}
	return num + " " + word
}

// times writes a ratio as the table does: 0.50x, 1.02x, 21x.
func times(r float64) string {
	if r >= 10 {
		return fmt.Sprintf("%.0fx", r)
	}
	return fmt.Sprintf("%.2fx", r)
}

// Row is one figure of the report, with a value per daemon.
type Row struct {
	Figure string           `json:"figure"`
	Kind   Kind             `json:"kind"`
	Values map[string]Value `json:"values"`
	// Note adds what the values do not say (timeouts among the events, say).
	Note string `json:"note,omitempty"`
	// Shared marks one measurement given to every daemon (the kernel's floor): no ratio.
	Shared bool `json:"shared,omitempty"`
}

// value is the row's value for a daemon, missing if it has none.
func (r Row) value(daemon string) Value {
	if v, ok := r.Values[daemon]; ok {
		return v
	}
	return missing("not measured")
}

// Report is the outcome of a run.
type Report struct {
	Command string        `json:"command"`
	Started time.Time     `json:"started"`
	Took    time.Duration `json:"took_ns"`
	Daemons []string      `json:"daemons"`
	Rows    []Row         `json:"rows"`
	// Errors are the failures met along the way; the figures they concern are missing.
	Errors []string `json:"errors,omitempty"`
}

// add appends a figure; values maps each daemon to its samples, of which the median goes in.
func (r *Report) add(figure string, k Kind, values map[string][]Value, note string) {
	row := Row{Figure: figure, Kind: k, Values: make(map[string]Value), Note: note}
	for d, samples := range values {
		row.Values[d] = median(samples)
	}
	r.Rows = append(r.Rows, row)
}

// WriteMarkdown writes the report as a Markdown table (readable as plain text too), with the
// command line and how long the run took under it.
func (r *Report) WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	both := slices.Contains(r.Daemons, Flanneld) && slices.Contains(r.Daemons, Weftd)
	b.WriteString("| figure |")
	for _, d := range r.Daemons {
		b.WriteString(" " + d + " |")
	}
	if both {
		b.WriteString(" weftd/flanneld |")
	}
	b.WriteString("\n|---|")
	for range r.Daemons {
		b.WriteString("---|")
	}
	if both {
		b.WriteString("---|")
	}
	b.WriteString("\n")
	for _, row := range r.Rows {
		b.WriteString("| " + row.Figure)
		if row.Note != "" {
			b.WriteString(" (" + row.Note + ")")
		}
		b.WriteString(" |")
		for _, d := range r.Daemons {
			b.WriteString(" " + row.value(d).Format(row.Kind) + " |")
		}
		if both {
			ratio := ""
			if !row.Shared {
				ratio = Ratio(row.Kind, row.value(Flanneld), row.value(Weftd))
			}
			b.WriteString(" " + ratio + " |")
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "\n%s, %v on %s\n", r.Command, r.Took.Round(time.Second), r.Started.Format(time.RFC3339))
	for _, e := range r.Errors {
		b.WriteString("error: " + e + "\n")
	}
	_, err := io.WriteString(w, b.String())
	if err != nil {
		return fmt.Errorf("writing the report: %w", err)
	}
	return nil
}

// percentile is the q-quantile (0 < q <= 1, nearest rank) of event latencies, where each of
// the timeouts counts as longer than any latency: a bound (timeout) when it falls among them.
func percentile(lat []time.Duration, timeouts int, timeout time.Duration, q float64) Value {
	n := len(lat) + timeouts
	if n == 0 {
		return missing("no events")
	}
	s := slices.Clone(lat)
	slices.Sort(s)
	i := int(math.Ceil(q*float64(n))) - 1
	i = min(max(i, 0), n-1)
	if i >= len(s) {
		return timedOut(timeout)
	}
	return seconds(s[i])
}
