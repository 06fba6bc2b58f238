package hnsfile

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRead: what each file may say, and what Read makes of it.
func TestRead(t *testing.T) {
	subnetFile := filepath.Join(tempDir(t), "subnet.env")
	netFile, vipFile := Paths(subnetFile)
	if n, err := Read(subnetFile); err != nil || n != (Network{}) {
		t.Errorf("no files: %+v, %v; want zero, nil", n, err)
	}
	write := func(path, content string) {
		t.Helper()
		if content == "" {
			if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
				t.Fatal(err)
			}
			return
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		network, vip string // file contents, "" for no file
		want         string // the error, or the network read as "name type vip"
	}{
		{"", `{"cniVersion":"0.2.0","ip4":{"ip":"10.244.1.254/24"}}` + "\n", "  10.244.1.254"},
		{"", `{"ip":"10.244.1.253"}`, "  10.244.1.253"},
		{`{"name":"flannel.4096","type":"Overlay"}`, `{"ip4":{"ip":"10.244.1.254/24"}}`, "flannel.4096 Overlay 10.244.1.254"},
		{`{"name":"cbr0","type":"L2Bridge"}`, "", "cbr0 L2Bridge invalid IP"},
		{`{"name":"cbr0","type":"l2bridge"}`, "", "cbr0 l2bridge invalid IP"},
		{`{"name":"x","type":"Transparent"}`, "", `hns.json: type "Transparent": want Overlay or L2Bridge`},
		{`{"type":"Overlay"}`, "", "hns.json: no name"},
		{`{"name":`, "", "hns.json: malformed"},
		{"", `{"ip4":{"ip":"10.1"}}`, `sourceVip.json: ip4.ip "10.1"`},
		{"", `{"ip4":{}}`, `sourceVip.json: ip4.ip ""`},
		{"", `[`, "sourceVip.json: malformed"},
	} {
		write(netFile, tc.network)
		write(vipFile, tc.vip)
		n, err := Read(subnetFile)
		got := fmt.Sprintf("%s %s %s", n.Name, n.Type, n.SourceVIP)
		if err != nil {
			got = err.Error()
			if _, ok := errors.AsType[*FormatError](err); !ok {
				t.Errorf("%s and %s: %v is no *FormatError", tc.network, tc.vip, err)
			}
		}
		if !strings.Contains(got, tc.want) {
			t.Errorf("%s and %s: %s; want %s", tc.network, tc.vip, got, tc.want)
		}
	}
}

// TestReadsWhatIsWritten: Read gives back what WriteNetwork and WriteSourceVIP wrote, and the
// source VIP file is host-local's 0.2.0 result, which kube-proxy's start-up scripts read.
func TestReadsWhatIsWritten(t *testing.T) {
	subnetFile := filepath.Join(tempDir(t), "run", "subnet.env")
	netFile, vipFile := Paths(subnetFile)
	vip := netip.MustParsePrefix("10.244.1.254/24")
	if err := WriteSourceVIP(vipFile, vip); err != nil { // makes the directory
		t.Fatal(err)
	}
	if err := WriteNetwork(netFile, Network{Name: "flannel.4096", Type: Overlay}); err != nil {
		t.Fatal(err)
	}
	n, err := Read(subnetFile)
	if err != nil || n != (Network{Name: "flannel.4096", Type: Overlay, SourceVIP: vip.Addr()}) {
		t.Errorf("read %+v, %v; want flannel.4096, %s, source VIP %s", n, err, Overlay, vip.Addr())
	}
	b, err := os.ReadFile(vipFile)
	if want := `{"cniVersion":"0.2.0","ip4":{"ip":"10.244.1.254/24"}}` + "\n"; err != nil || string(b) != want {
		t.Errorf("%s holds %q, %v; want %q", SourceVIPFile, b, err, want)
	}
}

// tempDir is a directory for one test, removed file by file when it ends. t.TempDir's
// cleanup fails under Wine, where these tests run (make wine): Go's RemoveAll deletes through
// FileDispositionInformationEx, which Wine 8 answers with STATUS_INVALID_DEVICE_REQUEST
// ("Invalid function"), a status Go does not fall back from; os.Remove's DeleteFile works.
func tempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "hnsfile-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		var paths []string
		_ = filepath.WalkDir(dir, func(path string, _ os.DirEntry, err error) error {
			if err == nil {
				paths = append(paths, path)
			}
			return nil
		})
		// Deepest first: a directory's entries before it.
		for i := len(paths) - 1; i >= 0; i-- {
			if err := os.Remove(paths[i]); err != nil {
				t.Errorf("removing the test's directory: %v", err)
			}
		}
	})
	return dir
}
