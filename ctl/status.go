package ctl

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/weftnet/weft/internal/flagenv"
	"github.com/weftnet/weft/status"
)

// defaultAddr is weftd's default --healthz-ip and --healthz-port.
const defaultAddr = "127.0.0.1:8285"

func runStatus(ctx context.Context, args []string, out io.Writer) error {
	var c common
	fs := flag.NewFlagSet("weftctl status", flag.ContinueOnError)
	c.addFlags(fs)
	addr := fs.String("addr", weftdAddr(os.LookupEnv), "weftd's health address, host:port (its --healthz-ip and --healthz-port)")
	if err := parse(fs, args, out, &c); err != nil {
		return err
	}
	if err := checkAddr(*addr); err != nil {
		return usageError{err}
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	st, err := fetchStatus(ctx, *addr)
	if err != nil {
		return err
	}
	if c.output == "json" {
		return writeJSON(out, st)
	}
	return writeStatus(out, st, time.Now())
}

// weftdAddr is weftd's health address as weftd's environment sets it (WEFTD_HEALTHZ_IP and
// WEFTD_HEALTHZ_PORT, or FLANNELD_*), so that weftctl run in weftd's pod, where the
// DaemonSet sets the node's address, finds it without --addr. An unspecified address
// (0.0.0.0) is reached on loopback; unset or unusable variables give defaultAddr's parts,
// as weftd would refuse to start with the latter anyway.
func weftdAddr(lookup func(string) (string, bool)) string {
	host, port, _ := net.SplitHostPort(defaultAddr)
	fs := flag.NewFlagSet("weftd", flag.ContinueOnError)
	ip := fs.String("healthz-ip", host, "")
	p := fs.String("healthz-port", port, "")
	if err := flagenv.Load(fs, lookup); err != nil {
		return defaultAddr
	}
	a, err := netip.ParseAddr(*ip)
	if err != nil {
		return defaultAddr
	}
	if a.IsUnspecified() {
		a = netip.AddrFrom4([4]byte{127, 0, 0, 1})
	}
	return net.JoinHostPort(a.String(), *p)
}

func checkAddr(addr string) error {
	if _, port, err := net.SplitHostPort(addr); err != nil || port == "" {
		return fmt.Errorf("--addr=%q: want host:port, e.g. %s", addr, defaultAddr)
	}
	return nil
}

// get fetches a path of weftd's health server.
func get(ctx context.Context, addr, path string) (int, []byte, error) {
	u := "http://" + addr + path
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, nil, fmt.Errorf("--addr=%s: %w", addr, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		// The url.Error would name the URL a second time.
		if ue := (*url.Error)(nil); errors.As(err, &ue) {
			err = ue.Err
		}
		return 0, nil, fmt.Errorf("GET %s (--addr=%s): %w", u, addr, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return resp.StatusCode, nil, fmt.Errorf("reading GET %s: %w", u, err)
	}
	return resp.StatusCode, body, nil
}

func fetchStatus(ctx context.Context, addr string) (status.Node, error) {
	code, body, err := get(ctx, addr, "/status")
	if err != nil {
		return status.Node{}, err
	}
	if code != http.StatusOK {
		return status.Node{}, fmt.Errorf("GET http://%s/status: %d %s", addr, code, strings.TrimSpace(string(body)))
	}
	var st status.Node
	if err := json.Unmarshal(body, &st); err != nil {
		return status.Node{}, fmt.Errorf("GET http://%s/status: not weftd's status: %w", addr, err)
	}
	return st, nil
}

func writeStatus(out io.Writer, st status.Node, now time.Time) error {
	t := newTable(out)
	node := orDash(st.Interface)
	if st.Address != "" {
		node += " " + st.Address
	}
	if st.PublicIP != "" && st.PublicIP != st.Address {
		node += ", public IP " + st.PublicIP
	}
	if st.Address6 != "" {
		node += ", IPv6 " + st.Address6
		if st.PublicIPv6 != "" && st.PublicIPv6 != st.Address6 {
			node += ", public IPv6 " + st.PublicIPv6
		}
	}
	t.row("node", node+", backend "+orDash(st.Backend))
	if l := st.Lease; l != nil {
		lease := l.Subnet
		if l.IPv6Subnet != "" {
			lease = strings.TrimPrefix(lease+" and "+l.IPv6Subnet, " and ")
		}
		if l.Expiration != nil {
			lease += ", expires " + expires(l.Expiration, now)
		} else {
			lease += ", never expires"
		}
		if d, ok := vxlanData(l.BackendData); ok {
			lease += fmt.Sprintf(", VNI %d, VTEP MAC %s", d.VNI, d.VtepMAC)
		}
		t.row("lease", lease)
	} else {
		t.row("lease", "none yet")
	}
	for _, w := range st.WireGuard {
		t.row("wireguard", fmt.Sprintf("%s, port %d, public key %s, %s", w.Device, w.ListenPort, w.PublicKey, w.Implementation))
	}
	ready := "yes"
	if !st.Ready {
		ready = "no: " + st.NotReady
	}
	t.row("ready", ready)
	if c := st.Last; c != nil {
		s := fmt.Sprintf("%s (%s ago), took %s", c.Time.UTC().Format(time.RFC3339), roundDuration(now.Sub(c.Time)), c.Duration)
		if c.Changes != "" {
			s += ", wrote " + c.Changes
		}
		if c.Error != "" {
			s += ", FAILED: " + c.Error
		}
		t.row("converged", s)
	} else {
		t.row("converged", "not yet")
	}
	if o := st.Overlay; o != nil {
		t.row("overlay", fmt.Sprintf("%d of %d peers answer probes through the data plane, %d unreachable; each probed at least every %s",
			o.Answered, o.Peers, o.Unreachable, o.Period))
		if o.MTU > 0 {
			t.row("path mtu", pathMTU(o))
		}
	}
	if np := st.NetworkPolicy; np != nil {
		s := fmt.Sprintf("%d pods isolated, %d open, %d refused policies", len(np.Pods), np.Open, len(np.Refused))
		if np.Written != nil {
			s += fmt.Sprintf(", last written %s ago", roundDuration(now.Sub(*np.Written)))
		}
		if np.Error != "" {
			s += ", FAILED: " + np.Error
		}
		t.row("network policy", s)
	}
	for _, o := range st.Offload {
		s := o.Device + " tx checksum offload on"
		if !o.TxChecksum {
			s = o.Device + " tx checksum offload OFF: " + o.Reason
		}
		s += " (mode " + o.Mode + ")"
		if o.Problem != "" {
			s += "; " + o.Problem
		}
		t.row("offload", s)
	}
	if err := t.flush(); err != nil {
		return err
	}
	if err := writeUnreachable(out, st.Unreachable, now); err != nil {
		return err
	}
	if err := writePolicy(out, st.NetworkPolicy, now); err != nil {
		return err
	}
	if _, err := fmt.Fprintf(out, "\npeers: %d\n", len(st.Peers)); err != nil {
		return fmt.Errorf("writing the status: %w", err)
	}
	if len(st.Peers) == 0 {
		return nil
	}
	t = newTable(out)
	t.row("SUBNET", "PUBLIC IP", "BACKEND", "VTEP MAC", "STATE", "CLASHES WITH", "REASON")
	for _, p := range st.Peers {
		mac := ""
		if d, ok := vxlanData(p.BackendData); ok {
			mac = d.VtepMAC
		}
		t.row(orDash(p.Subnet), orDash(p.PublicIP), orDash(p.BackendType), orDash(mac), p.State, orDash(p.ClashesWith), p.Reason)
	}
	return t.flush()
}

// pathMTU says whether the overlay peers' paths carry what the pods send, naming those whose
// paths do not.
func pathMTU(o *status.Overlay) string {
	if len(o.MTUShort) == 0 {
		return fmt.Sprintf("overlay peers' paths carry the pods' MTU of %d bytes (none found short)", o.MTU)
	}
	var keys []string
	for _, p := range o.MTUShort {
		k := p.Key
		if p.Family != "" {
			k += " " + p.Family
		}
		if p.MTU > 0 {
			k += fmt.Sprintf(" (passes %d)", p.MTU)
		}
		keys = append(keys, k)
	}
	return fmt.Sprintf("SHORT: %d overlay peers' paths carry less than the pods' MTU of %d bytes: %s",
		len(keys), o.MTU, strings.Join(keys, ", "))
}

// writePolicy lists the pods that NetworkPolicy isolates, with the policies that select each,
// and the policies refused, if any.
func writePolicy(out io.Writer, np *status.NetworkPolicy, _ time.Time) error {
	if np == nil || len(np.Pods)+len(np.Refused) == 0 {
		return nil
	}
	if _, err := fmt.Fprintf(out, "\nisolated pods: %d\n", len(np.Pods)); err != nil {
		return fmt.Errorf("writing the status: %w", err)
	}
	t := newTable(out)
	t.row("POD", "ADDRESSES", "ISOLATED", "POLICIES")
	for _, p := range np.Pods {
		var dirs []string
		if p.Ingress {
			dirs = append(dirs, "ingress")
		}
		if p.Egress {
			dirs = append(dirs, "egress")
		}
		t.row(p.Pod, orDash(strings.Join(p.IPs, ",")), strings.Join(dirs, ","), orDash(strings.Join(p.Policies, ",")))
	}
	for _, r := range np.Refused {
		t.row("refused: "+r.Policy, "", "", r.Reason)
	}
	return t.flush()
}

// writeUnreachable lists the peers whose probes go unanswered, if any.
func writeUnreachable(out io.Writer, peers []status.Unreachable, now time.Time) error {
	if len(peers) == 0 {
		return nil
	}
	if _, err := fmt.Fprintf(out, "\nunreachable: %d\n", len(peers)); err != nil {
		return fmt.Errorf("writing the status: %w", err)
	}
	t := newTable(out)
	t.row("PEER", "PROBED", "SINCE", "LAST ERROR")
	for _, u := range peers {
		since := u.Since.UTC().Format(time.RFC3339) + " (" + roundDuration(now.Sub(u.Since)) + " ago)"
		t.row(u.Key, u.Address, since, u.Error)
	}
	return t.flush()
}
