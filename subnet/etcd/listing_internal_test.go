package etcd

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/weftnet/weft/internal/etcdtest"
)

// TestListingInPages: a listing read in pages of a few leases holds what one response holds,
// as of the same revision, the keys that are no lease and the bad values included; and the
// watch's first batch, made in place of the listing's slots, is the one made of copies.
func TestListingInPages(t *testing.T) {
	srv := etcdtest.Start(t, etcdtest.Options{})
	cli := srv.Client(t)
	one := New(cli, Options{ListPage: 1000})
	paged := New(cli, Options{ListPage: 4})
	put := func(k, v string) {
		t.Helper()
		if _, err := cli.Put(t.Context(), k, v); err != nil {
			t.Fatal(err)
		}
	}
	const leases = 23
	for i := range leases {
		kv := benchKV(one, i, 0)
		put(string(kv.Key), string(kv.Value))
	}
	put(one.subnetsDir()+"junk", "{}")
	put(one.subnetsDir()+"10.9.9.0-24", `{"PublicIP":"nope"}`)
	put(one.prefix+"/subnetsX", "{}") // beyond the subnets directory's range

	type seen struct {
		key                    string
		modRev, created, lease int64
		named, bad             bool
		subnet, publicIP, vtep string
	}
	show := func(m *Manager, parse bool) ([]seen, int64, *listing) {
		t.Helper()
		ls, err := m.listPages(t.Context(), parse)
		if err != nil {
			t.Fatal(err)
		}
		var out []seen
		for _, e := range ls.entries {
			m.parseValue(&e)
			out = append(out, seen{key: e.key, modRev: e.modRev, created: e.created, lease: int64(e.leaseID), named: e.named,
				bad: e.valErr != nil, subnet: e.lease.Subnet.String(), publicIP: e.lease.Attrs.PublicIP.String(),
				vtep: string(e.lease.Attrs.BackendData)})
		}
		return out, ls.rev, ls
	}
	want, wantRev, _ := show(one, true)
	if len(want) != leases+2 {
		t.Fatalf("one response: %d entries, want %d", len(want), leases+2)
	}
	for _, parse := range []bool{true, false} {
		got, rev, _ := show(paged, parse)
		if rev != wantRev {
			t.Errorf("pages (parsed %t): revision %d, want %d", parse, rev, wantRev)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("pages (parsed %t):\n%v\nwant\n%v", parse, got, want)
		}
	}

	_, _, ls := show(paged, true)
	if len(ls.slots) != len(ls.entries) {
		t.Fatalf("%d slots for %d entries", len(ls.slots), len(ls.entries))
	}
	copies := newWatcher(paged, nil).relisted(ls.entries, nil)
	inPlace := newWatcher(paged, nil).relisted(ls.entries, ls.slots)
	if len(copies) != leases || fmt.Sprint(inPlace) != fmt.Sprint(copies) {
		t.Errorf("first batch in the slots:\n%v\nwant\n%v", inPlace, copies)
	}
	if len(inPlace) > 0 && &inPlace[0] != &ls.slots[0] {
		t.Error("the first batch is a copy of the slots, not the slots themselves") // a copy of every lease at the start's peak
	}
}
