// Package leasecompat_test reads a lease value as weft writes it with flanneld's own type,
// lease.LeaseAttrs of the flannel this module pins: subnet's TestFlannelReadsWeftLease runs it
// with the value in WEFT_LEASE_VALUE and, in WEFT_LEASE_FLANNEL, what flanneld must write
// back when it takes the lease over (weft's keys it does not know dropped).
package leasecompat_test

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/flannel-io/flannel/pkg/lease"
)

func TestFlanneldReadsWeftLease(t *testing.T) {
	value, want := os.Getenv("WEFT_LEASE_VALUE"), os.Getenv("WEFT_LEASE_FLANNEL")
	if value == "" {
		t.Skip("run by subnet's TestFlannelReadsWeftLease, which gives the value")
	}
	var a lease.LeaseAttrs
	if err := json.Unmarshal([]byte(value), &a); err != nil {
		t.Fatalf("flanneld cannot read %s: %v", value, err)
	}
	back, err := json.Marshal(&a)
	if err != nil {
		t.Fatal(err)
	}
	if string(back) != want {
		t.Errorf("flanneld read %s\nand writes back %s\nwant %s", value, back, want)
	}
}
