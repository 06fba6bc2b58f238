package linux

import (
	"bytes"
	"slices"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// FuzzParseMessages: parseMessages reads a receive buffer as syscall.ParseNetlinkMessage
// does, which it replaces for its garbage: the same messages, or an error where that one
// fails; appended to what the slice held.
func FuzzParseMessages(f *testing.F) {
	two := appendFrame(nil, message{typ: unix.RTM_NEWROUTE, body: rtmsg(unix.AF_INET, 24, 0, 0, 0, 0, 0, 0)}, unix.NLM_F_MULTI, 7)
	two = appendFrame(two, message{typ: unix.NLMSG_DONE, body: []byte{0, 0, 0, 0}}, unix.NLM_F_MULTI, 7)
	f.Add(two)
	f.Add(two[:len(two)-3])                                           // the last message cut short
	f.Add(append(slices.Clone(two), 1, 2, 3))                         // bytes too few for a header after the last
	f.Add([]byte{15, 0, 0, 0, 3, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0})    // a length below the header's
	f.Add([]byte{17, 0, 0, 0, 3, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 9}) // aligned, it runs past the end
	f.Fuzz(func(t *testing.T, b []byte) {
		want, wantErr := syscall.ParseNetlinkMessage(b)
		held := []syscall.NetlinkMessage{{Header: syscall.NlMsghdr{Type: 99}}}
		got, err := parseMessages(held[:1], b)
		if (err != nil) != (wantErr != nil) {
			t.Fatalf("error %v, syscall.ParseNetlinkMessage's %v", err, wantErr)
		}
		if err != nil {
			return
		}
		if len(got) != len(want)+1 || got[0].Header.Type != 99 {
			t.Fatalf("%d messages after the one held, want %d", len(got)-1, len(want))
		}
		for i, w := range want {
			if g := got[i+1]; g.Header != w.Header || !bytes.Equal(g.Data, w.Data) {
				t.Fatalf("message %d: %+v %x, want %+v %x", i, g.Header, g.Data, w.Header, w.Data)
			}
		}
	})
}
