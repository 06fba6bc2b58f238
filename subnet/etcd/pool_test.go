package etcd_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/weftnet/weft/internal/etcdtest"
	"github.com/weftnet/weft/subnet"
	"github.com/weftnet/weft/subnet/etcd"
)

// TestPool: the watch keeps count of the subnets of the config's ranges that hold a key —
// good values and bad alike, each key once however often it is written — through puts,
// deletions, and a compaction the watch lists again across; keys that are no subnet of a
// range are not counted.
func TestPool(t *testing.T) {
	srv := etcdtest.Start(t, etcdtest.Options{})
	cli := srv.Client(t)
	// 10.1.1.0 to 10.1.8.0: 8 subnets; IPv6 fd00:1::/60 in /64s from fd00:1:0:4:: : 12.
	put(t, cli, etcd.DefaultPrefix+"/config", `{"Network":"10.1.0.0/16","SubnetMin":"10.1.1.0","SubnetMax":"10.1.8.0",`+
		`"EnableIPv6":true,"IPv6Network":"fd00:1::/60","IPv6SubnetMin":"fd00:1:0:4::","Backend":{"Type":"host-gw"}}`)
	proxy := srv.Proxy(t)
	m := etcd.New(proxy.Client(t, srv), etcd.Options{Logger: testLogger(t)})
	if p := m.Pool(); p != nil {
		t.Errorf("Pool before any config or watch: %+v, want nil", p)
	}
	if _, err := m.GetConfig(t.Context()); err != nil {
		t.Fatal(err)
	}
	dual := func(i int) string {
		return fmt.Sprintf(`{"PublicIP":"192.0.2.%d","PublicIPv6":"fd77::%d","BackendType":"host-gw"}`, i, i)
	}
	put(t, cli, etcd.DefaultPrefix+"/subnets/10.1.1.0-24&fd00:1:0:4::-64", dual(1))
	put(t, cli, etcd.DefaultPrefix+"/subnets/10.1.2.0-24&fd00:1:0:5::-64", "not JSON") // counted: its key is taken
	put(t, cli, etcd.DefaultPrefix+"/subnets/10.1.9.0-24&fd00:1:0:1::-64", dual(9))    // outside both ranges
	put(t, cli, etcd.DefaultPrefix+"/subnets/10.1.0.0-16", dual(10))                   // no subnet of the range
	w := watch(t, m)
	w.wait(t, "10.1.1.0-24&fd00:1:0:4::-64", "10.1.9.0-24&fd00:1:0:1::-64", "10.1.0.0-16")
	pool := func(want4, want6 uint64) {
		t.Helper()
		want := fmt.Sprint([]subnet.PoolUsage{{Total: 8, Leased: want4}, {IPv6: true, Total: 12, Leased: want6}})
		var got string
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if got = fmt.Sprint(m.Pool()); got == want {
				return
			}
		}
		t.Fatalf("Pool() = %s, want %s", got, want)
	}
	pool(2, 2)

	put(t, cli, etcd.DefaultPrefix+"/subnets/10.1.3.0-24&fd00:1:0:6::-64", dual(3))
	put(t, cli, etcd.DefaultPrefix+"/subnets/10.1.3.0-24&fd00:1:0:6::-64", dual(33)) // written again: the same key
	put(t, cli, etcd.DefaultPrefix+"/subnets/10.1.1.0-24&fd00:1:0:4::-64", "bad now")
	pool(3, 3)
	if _, err := cli.Delete(t.Context(), etcd.DefaultPrefix+"/subnets/10.1.2.0-24&fd00:1:0:5::-64"); err != nil {
		t.Fatal(err)
	}
	pool(2, 2)

	// Missed and compacted away: the watch lists again, and counts from the listing.
	proxy.Cut()
	put(t, cli, etcd.DefaultPrefix+"/subnets/10.1.4.0-24", `{"PublicIP":"192.0.2.4","BackendType":"host-gw"}`)
	put(t, cli, etcd.DefaultPrefix+"/subnets/10.1.5.0-24", "{")
	if _, err := cli.Delete(t.Context(), etcd.DefaultPrefix+"/subnets/10.1.3.0-24&fd00:1:0:6::-64"); err != nil {
		t.Fatal(err)
	}
	srv.Compact(t)
	proxy.Restore()
	pool(3, 1)
}
