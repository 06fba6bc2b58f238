package ctl

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/weftnet/weft/daemon"
	"github.com/weftnet/weft/subnet"
)

// LeaseRow is one lease as weftctl leases shows it.
type LeaseRow struct {
	Key         string     `json:"key"`
	Subnet      string     `json:"subnet,omitempty"`
	IPv6Subnet  string     `json:"ipv6Subnet,omitempty"`
	PublicIP    string     `json:"publicIP,omitempty"`
	BackendType string     `json:"backendType,omitempty"`
	VtepMAC     string     `json:"vtepMAC,omitempty"`
	VNI         *uint32    `json:"vni,omitempty"`
	Expiration  *time.Time `json:"expiration,omitempty"`
	Error       string     `json:"error,omitempty"` // why the lease cannot be read
}

func runLeases(ctx context.Context, args []string, out io.Writer) error {
	var c common
	cfg := daemon.DefaultConfig()
	fs := flag.NewFlagSet("weftctl leases", flag.ContinueOnError)
	c.addFlags(fs)
	c.addWeftdFlags(fs, &cfg, datastoreFlags()...)
	if err := parse(fs, args, out, &c); err != nil {
		return err
	}
	store, err := openStore(cfg)
	if err != nil {
		return err
	}
	defer store.Close()
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	entries, err := store.Leases(ctx)
	if err != nil {
		return err
	}
	rows := leaseRows(entries)
	if c.output == "json" {
		return writeJSON(out, rows)
	}
	// In Kubernetes mode the subnets are the Nodes' podCIDRs: the pool is the controller
	// manager's, not weft's.
	var pool []string
	if net, err := store.Config(ctx); err != nil {
		pool = []string{"pool: unknown: " + err.Error()}
	} else if !cfg.KubeSubnetMgr {
		pool = poolLines(net, entries)
	}
	return writeLeases(out, rows, pool, time.Now())
}

// poolLines tell how much of each of the config's subnet ranges the entries' keys take (as
// the allocator sees it: a key whose value cannot be read still takes its subnet).
func poolLines(cfg *subnet.Config, entries []Entry) []string {
	taken := make([]netip.Prefix, 0, 2*len(entries))
	for _, e := range entries {
		taken = append(taken, e.Lease.Subnet, e.Lease.IPv6Subnet)
	}
	var out []string
	for _, p := range []struct {
		fam string
		r   subnet.Range
	}{{"IPv4", cfg.IPv4Range()}, {"IPv6", cfg.IPv6Range()}} {
		n := p.r.Size()
		if n == 0 {
			continue
		}
		leased := p.r.Leased(taken)
		out = append(out, fmt.Sprintf("pool %s: %d of %d subnets free (/%d from %s to %s, %d leased)",
			p.fam, n-leased, n, p.r.Len, p.r.Min, p.r.Max, leased))
	}
	return out
}

// leaseRows turns entries into rows, ordered by subnet.
func leaseRows(entries []Entry) []LeaseRow {
	sorted := slices.Clone(entries)
	slices.SortFunc(sorted, func(a, b Entry) int {
		if c := a.Lease.Subnet.Addr().Compare(b.Lease.Subnet.Addr()); c != 0 {
			return c
		}
		return strings.Compare(a.Key, b.Key)
	})
	rows := make([]LeaseRow, 0, len(sorted))
	for _, e := range sorted {
		l := e.Lease
		r := LeaseRow{Key: e.Key, Subnet: prefixString(l.Subnet), IPv6Subnet: prefixString(l.IPv6Subnet),
			BackendType: l.Attrs.BackendType}
		if l.Attrs.PublicIP.IsValid() {
			r.PublicIP = l.Attrs.PublicIP.String()
		}
		if !l.Expiration.IsZero() {
			exp := l.Expiration.UTC()
			r.Expiration = &exp
		}
		if e.Err != nil {
			r.Error = e.Err.Error()
		} else if d, ok := vxlanData(l.Attrs.BackendData); ok {
			r.VtepMAC, r.VNI = d.VtepMAC, &d.VNI
		}
		rows = append(rows, r)
	}
	return rows
}

// vxlanData reads the VTEP of a vxlan lease loosely: a listing shows what is there, valid or
// not (the doctor says whether a peer is usable).
func vxlanData(raw json.RawMessage) (struct {
	VNI     uint32
	VtepMAC string
}, bool) {
	var d struct {
		VNI     uint32
		VtepMAC string
	}
	ok := len(raw) > 0 && json.Unmarshal(raw, &d) == nil && d.VtepMAC != ""
	return d, ok
}

// writeLeases writes the leases as a table, then the pool's lines.
func writeLeases(out io.Writer, rows []LeaseRow, pool []string, now time.Time) error {
	if err := writeLeaseTable(out, rows, now); err != nil {
		return err
	}
	if len(pool) == 0 {
		return nil
	}
	if _, err := fmt.Fprintf(out, "\n%s\n", strings.Join(pool, "\n")); err != nil {
		return fmt.Errorf("writing the pool: %w", err)
	}
	return nil
}

func writeLeaseTable(out io.Writer, rows []LeaseRow, now time.Time) error {
	if len(rows) == 0 {
		_, err := fmt.Fprintln(out, "no leases")
		return err
	}
	t := newTable(out)
	t.row("SUBNET", "PUBLIC IP", "BACKEND", "VTEP MAC", "EXPIRES")
	var bad []string
	for _, r := range rows {
		sn := r.Subnet
		if r.IPv6Subnet != "" {
			sn = strings.TrimPrefix(sn+" "+r.IPv6Subnet, " ")
		}
		if r.Error != "" {
			// Below the table: a line of another shape would break its columns.
			bad = append(bad, r.Key+": "+r.Error)
			t.row(orDash(sn), "unreadable", "-", "-", "-")
			continue
		}
		t.row(orDash(sn), orDash(r.PublicIP), orDash(r.BackendType), orDash(r.VtepMAC), expires(r.Expiration, now))
	}
	if err := t.flush(); err != nil {
		return err
	}
	if len(bad) > 0 {
		if _, err := fmt.Fprintf(out, "\nunreadable, skipped by every node:\n  %s\n", strings.Join(bad, "\n  ")); err != nil {
			return fmt.Errorf("writing the leases: %w", err)
		}
	}
	return nil
}

// expires says when, and in how long, for people.
func expires(at *time.Time, now time.Time) string {
	if at == nil {
		return "-"
	}
	left := at.Sub(now)
	if left <= 0 {
		return at.Format(time.RFC3339) + " (expired)"
	}
	return fmt.Sprintf("%s (in %s)", at.Format(time.RFC3339), roundDuration(left))
}

// roundDuration keeps a duration to two units: 23h59m, 4m10s, 3s.
func roundDuration(d time.Duration) string {
	switch {
	case d >= time.Hour:
		d = d.Round(time.Minute)
	case d >= time.Minute:
		d = d.Round(time.Second)
	default:
		d = d.Round(100 * time.Millisecond)
	}
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	return s
}

func prefixString(p netip.Prefix) string {
	if !p.IsValid() {
		return ""
	}
	return p.String()
}
