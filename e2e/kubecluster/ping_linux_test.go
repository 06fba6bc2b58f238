package kubecluster

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// pingOutput writes what busybox's ping prints for the requests 0 to n-1 answered unless
// lost says otherwise, with the summary line at the end.
func pingOutput(n int, lost func(int) bool) string {
	var b strings.Builder
	b.WriteString("PING 10.244.1.2 (10.244.1.2): 56 data bytes\n")
	got := 0
	for i := 0; i < n; i++ {
		if lost(i) {
			continue
		}
		got++
		fmt.Fprintf(&b, "64 bytes from 10.244.1.2: seq=%d ttl=62 time=0.%03d ms\n", i%65536, i%1000)
	}
	fmt.Fprintf(&b, "\n--- 10.244.1.2 ping statistics ---\n%d packets transmitted, %d packets received, %d%% packet loss\n", n+1, got, 0)
	return b.String()
}

func TestParsePing(t *testing.T) {
	for _, tc := range []struct {
		name string
		out  string
		want PingResult
	}{
		{"nothing lost", pingOutput(500, func(int) bool { return false }), PingResult{Sent: 500}},
		{"a gap and a single loss", pingOutput(500, func(i int) bool { return (i >= 100 && i < 103) || i == 300 }),
			PingResult{Sent: 500, Lost: 4, Gaps: []PingGap{{Seq: 100, Len: 3}, {Seq: 300, Len: 1}}}},
		// The unanswered requests at the end are the one in flight when ping stopped, and
		// are not counted.
		{"the last ones unanswered", pingOutput(500, func(i int) bool { return i >= 498 }), PingResult{Sent: 498}},
		{"sequence numbers wrap", pingOutput(70000, func(i int) bool { return i == 65535 || i == 65536 }),
			PingResult{Sent: 70000, Lost: 2, Gaps: []PingGap{{Seq: 65535, Len: 2}}}},
		{"duplicates are not answers", pingOutput(3, func(i int) bool { return i == 1 }) +
			"64 bytes from 10.244.1.2: seq=1 ttl=62 time=0.1 ms (DUP!)\n",
			PingResult{Sent: 3, Lost: 1, Gaps: []PingGap{{Seq: 1, Len: 1}}}},
	} {
		got, err := parsePing(tc.out)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: got %+v, want %+v", tc.name, got, tc.want)
		}
	}
	if _, err := parsePing("PING 10.244.1.2 (10.244.1.2): 56 data bytes\n"); err == nil {
		t.Error("no reply: no error")
	}
	if _, err := parsePing(strings.Split(pingOutput(5, func(int) bool { return false }), "\n\n")[0]); err == nil {
		t.Error("no summary (the ping died): no error")
	}
}
