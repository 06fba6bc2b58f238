package ctl

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/weftnet/weft/internal/etcdtest"
	"github.com/weftnet/weft/subnet"
)

func TestWriteLeases(t *testing.T) {
	now := time.Date(2026, 11, 22, 1, 0, 0, 0, time.UTC)
	own := vxlanLease("10.244.1.0/24", "192.0.2.11", ownMAC)
	own.Expiration = now.Add(23*time.Hour + 59*time.Minute + 10*time.Second)
	hg := subnet.Lease{Subnet: netip.MustParsePrefix("10.244.12.0/24"),
		Attrs: subnet.LeaseAttrs{PublicIP: netip.MustParseAddr("192.0.2.12"), BackendType: "host-gw"}}
	entries := []Entry{
		{Key: "/coreos.com/network/subnets/10.244.12.0-24", Lease: hg},
		{Key: "/coreos.com/network/subnets/10.244.5.0-24", Lease: subnet.Lease{Subnet: netip.MustParsePrefix("10.244.5.0/24")},
			Err: errors.New(`lease attributes: PublicIP "x" is not an IPv4 address`)},
		{Key: "/coreos.com/network/subnets/" + own.Key(), Lease: own},
	}
	rows := leaseRows(entries)
	cfg, err := subnet.ParseConfig([]byte(`{"Network":"10.244.0.0/16","SubnetMax":"10.244.9.0","EnableIPv6":true,"IPv6Network":"fd00::/60","Backend":{"Type":"vxlan"}}`))
	if err != nil {
		t.Fatal(err)
	}

	var b bytes.Buffer
	if err := writeLeases(&b, rows, poolLines(cfg, entries), now); err != nil {
		t.Fatal(err)
	}
	want := `SUBNET          PUBLIC IP   BACKEND  VTEP MAC           EXPIRES
10.244.1.0/24   192.0.2.11  vxlan    0a:00:00:00:00:01  2026-11-23T00:59:10Z (in 23h59m)
10.244.5.0/24   unreadable  -        -                  -
10.244.12.0/24  192.0.2.12  host-gw  -                  -

unreadable, skipped by every node:
  /coreos.com/network/subnets/10.244.5.0-24: lease attributes: PublicIP "x" is not an IPv4 address

pool IPv4: 7 of 9 subnets free (/24 from 10.244.1.0 to 10.244.9.0, 2 leased)
pool IPv6: 15 of 15 subnets free (/64 from fd00:0:0:1:: to fd00:0:0:f::, 0 leased)
`
	if b.String() != want {
		t.Errorf("table:\n%s\nwant:\n%s", b.String(), want)
	}

	b.Reset()
	if err := writeJSON(&b, rows); err != nil {
		t.Fatal(err)
	}
	wantJSON := `[
  {
    "key": "/coreos.com/network/subnets/10.244.1.0-24",
    "subnet": "10.244.1.0/24",
    "publicIP": "192.0.2.11",
    "backendType": "vxlan",
    "vtepMAC": "0a:00:00:00:00:01",
    "vni": 1,
    "expiration": "2026-11-23T00:59:10Z"
  },
  {
    "key": "/coreos.com/network/subnets/10.244.5.0-24",
    "subnet": "10.244.5.0/24",
    "error": "lease attributes: PublicIP \"x\" is not an IPv4 address"
  },
  {
    "key": "/coreos.com/network/subnets/10.244.12.0-24",
    "subnet": "10.244.12.0/24",
    "publicIP": "192.0.2.12",
    "backendType": "host-gw"
  }
]
`
	if b.String() != wantJSON {
		t.Errorf("JSON:\n%s\nwant:\n%s", b.String(), wantJSON)
	}

	b.Reset()
	if err := writeLeases(&b, nil, nil, now); err != nil || b.String() != "no leases\n" {
		t.Errorf("no rows: %q, %v", b.String(), err)
	}
}

func TestExpires(t *testing.T) {
	now := time.Date(2026, 11, 22, 1, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		in   time.Duration
		want string
	}{
		{24 * time.Hour, "2026-11-23T01:00:00Z (in 24h0m)"},
		{90*time.Second + 400*time.Millisecond, "2026-11-22T01:01:30Z (in 1m30s)"},
		{5 * time.Minute, "2026-11-22T01:05:00Z (in 5m)"},
		{2500 * time.Millisecond, "2026-11-22T01:00:02Z (in 2.5s)"},
		{-time.Second, "2026-11-22T00:59:59Z (expired)"},
	} {
		at := now.Add(tc.in)
		if got := expires(&at, now); got != tc.want {
			t.Errorf("expires in %v: %q, want %q", tc.in, got, tc.want)
		}
	}
	if got := expires(nil, now); got != "-" {
		t.Errorf("no expiry: %q", got)
	}
}

// TestLeasesFromEtcd: weftctl leases against a real etcd, with an etcd lease on one key (its
// expiry shown), none on another (a reservation), and a key that is not a lease.
func TestLeasesFromEtcd(t *testing.T) {
	srv := etcdtest.Start(t, etcdtest.Options{})
	cli := srv.Client(t)
	ctx := context.Background()
	const prefix = "/weft-test"
	grant, err := cli.Grant(ctx, 3600)
	if err != nil {
		t.Fatal(err)
	}
	put := func(key, value string, opts ...clientv3.OpOption) {
		t.Helper()
		if _, err := cli.Put(ctx, prefix+"/subnets/"+key, value, opts...); err != nil {
			t.Fatal(err)
		}
	}
	put("10.244.1.0-24", `{"PublicIP":"192.0.2.11","BackendType":"vxlan","BackendData":{"VNI":1,"VtepMAC":"0a:00:00:00:00:01"}}`, clientv3.WithLease(grant.ID))
	put("10.244.2.0-24", `{"PublicIP":"192.0.2.12","BackendType":"host-gw","BackendData":null}`)
	put("10.244.3.0-24", `not json`)
	if _, err := cli.Put(ctx, prefix+"/config", `{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan"}}`); err != nil {
		t.Fatal(err)
	}

	var out, errOut bytes.Buffer
	code := Main(ctx, []string{"leases", "--etcd-endpoints=" + strings.Join(srv.Endpoints(), ","), "--etcd-prefix=" + prefix + "/", "-o", "json"}, &out, &errOut)
	if code != ExitOK {
		t.Fatalf("weftctl leases: exit %d: %s", code, errOut.String())
	}
	var rows []LeaseRow
	if err := json.Unmarshal(out.Bytes(), &rows); err != nil {
		t.Fatalf("%v:\n%s", err, out.String())
	}
	if len(rows) != 3 {
		t.Fatalf("rows %+v; want 3", rows)
	}
	if r := rows[0]; r.Subnet != "10.244.1.0/24" || r.VtepMAC != "0a:00:00:00:00:01" || r.Expiration == nil ||
		time.Until(*r.Expiration) < 59*time.Minute || time.Until(*r.Expiration) > time.Hour+time.Second {
		t.Errorf("lease with an etcd lease of 1h: %+v, expires %v", r, r.Expiration)
	}
	if r := rows[1]; r.Subnet != "10.244.2.0/24" || r.BackendType != "host-gw" || r.Expiration != nil || r.Error != "" {
		t.Errorf("reservation: %+v", r)
	}
	if r := rows[2]; r.Subnet != "10.244.3.0/24" || !strings.Contains(r.Error, "lease attributes") {
		t.Errorf("malformed lease: %+v", r)
	}
}

func TestLeasesErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"leases", "-o", "yaml"}, ExitUsage, `weftctl leases: -o="yaml": want table or json`},
		{[]string{"leases", "--kube-subnet-mgr", "--kubeconfig-file=/nonexistent/kubeconfig"}, ExitProblems,
			"weftctl leases: Kubernetes mode (--kube-subnet-mgr, --net-config-path=/etc/kube-flannel/net-conf.json): kube: "},
		{[]string{"leases", "--etcd-certfile=a.pem"}, ExitUsage, "weftctl leases: --etcd-endpoints=http://127.0.0.1:4001,http://127.0.0.1:2379: etcd: a client certificate needs both"},
		{[]string{"leases", "--etcd-endpoints=http://127.0.0.1:1", "--timeout=300ms"}, ExitProblems, "weftctl leases: listing /coreos.com/network/subnets/ at --etcd-endpoints=http://127.0.0.1:1: context deadline exceeded"},
		{[]string{"leases", "extra"}, ExitUsage, `weftctl leases: unexpected arguments ["extra"]`},
	} {
		var out, errOut bytes.Buffer
		code := Main(context.Background(), tc.args, &out, &errOut)
		if code != tc.code || !strings.HasPrefix(errOut.String(), tc.want) {
			t.Errorf("weftctl %s: exit %d, %q; want %d, %q", strings.Join(tc.args, " "), code, errOut.String(), tc.code, tc.want)
		}
	}
}
