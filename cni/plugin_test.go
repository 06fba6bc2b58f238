package cni

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/weftnet/weft/windows/hnsfile"
)

// recorder is a Delegator that records what it is asked to run; the real delegates run in
// the privileged test (plugin_linux_test.go) and in e2e.
type recorder struct {
	calls []call
	err   error // returned by every call
}

type call struct {
	command, plugin string
	conf            []byte
}

func (r *recorder) Add(_ context.Context, plugin string, conf []byte) (types.Result, error) {
	r.calls = append(r.calls, call{"ADD", plugin, conf})
	if r.err != nil {
		return nil, r.err
	}
	return &current.Result{CNIVersion: "1.0.0"}, nil
}

func (r *recorder) Check(_ context.Context, plugin string, conf []byte) error {
	r.calls = append(r.calls, call{"CHECK", plugin, conf})
	return r.err
}

func (r *recorder) Del(_ context.Context, plugin string, conf []byte) error {
	r.calls = append(r.calls, call{"DEL", plugin, conf})
	return r.err
}

// tempDir is t.TempDir, but for Windows tests run under Wine 8, where its cleanup fails (Go's
// RemoveAll uses a file disposition call Wine lacks): there the directory is left behind.
func tempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "weft-cni-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// node is a directory holding a subnet.env and the plugin's data directory.
type node struct {
	t          *testing.T
	subnetFile string
	dataDir    string
}

func newNode(t *testing.T) *node {
	dir := tempDir(t)
	n := &node{t: t, subnetFile: filepath.Join(dir, "subnet.env"), dataDir: filepath.Join(dir, "data")}
	n.writeEnv(fullEnv)
	return n
}

func (n *node) writeEnv(content string) {
	n.t.Helper()
	if err := os.WriteFile(n.subnetFile, []byte(content), 0o644); err != nil {
		n.t.Fatal(err)
	}
}

func (n *node) removeEnv() {
	n.t.Helper()
	if err := os.Remove(n.subnetFile); err != nil {
		n.t.Fatal(err)
	}
}

// args is an invocation for container id with the node's files; extra are more top-level
// keys, as JSON members.
func (n *node) args(id, extra string) Args {
	conf := fmt.Sprintf(`{"cniVersion":"1.1.0","name":"weftnet","type":"weft","subnetFile":%q,"dataDir":%q%s}`,
		n.subnetFile, n.dataDir, extra)
	return Args{ContainerID: id, Netns: "/var/run/netns/" + id, StdinData: []byte(conf)}
}

func (n *node) stored(id string) []byte {
	n.t.Helper()
	data, err := os.ReadFile(filepath.Join(n.dataDir, id))
	if err != nil {
		n.t.Fatal(err)
	}
	return data
}

func wantCode(t *testing.T, what string, err error, code uint, in ...string) {
	t.Helper()
	ce := ToCNI(err)
	if ce == nil {
		t.Fatalf("%s: no error; want code %d", what, code)
	}
	if ce.Code != code {
		t.Errorf("%s: code %d (%s); want %d", what, ce.Code, ce.Msg, code)
	}
	for _, s := range in {
		if !strings.Contains(ce.Msg, s) {
			t.Errorf("%s: %q does not say %q", what, ce.Msg, s)
		}
	}
}

// TestDelUsesStoredDelegate: DEL runs the delegate with exactly the configuration ADD kept,
// with subnet.env gone, and forgets it; a second DEL is a success that runs nothing.
func TestDelUsesStoredDelegate(t *testing.T) {
	n := newNode(t)
	rec := &recorder{}
	p := &Plugin{OS: Linux, Delegator: rec}
	ctx := context.Background()
	if _, err := p.Add(ctx, n.args("c1", "")); err != nil {
		t.Fatal(err)
	}
	if len(rec.calls) != 1 || rec.calls[0].plugin != "bridge" {
		t.Fatalf("calls %+v; want one ADD of bridge", rec.calls)
	}
	added := rec.calls[0].conf
	if got := n.stored("c1"); string(got) != string(added) {
		t.Fatalf("stored %s; want the ADD config %s", got, added)
	}
	// Windows has no such modes; there the directory's ACL is what protects it.
	if st, err := os.Stat(filepath.Join(n.dataDir, "c1")); err != nil || (runtime.GOOS != "windows" && st.Mode().Perm() != 0o600) {
		t.Errorf("stored file: %v, %v; want mode 0600", st, err)
	}

	n.removeEnv()
	if err := p.Del(ctx, n.args("c1", `,"delegate":{"type":"macvlan"}`)); err != nil {
		t.Fatal(err)
	}
	if len(rec.calls) != 2 || rec.calls[1].command != "DEL" || rec.calls[1].plugin != "bridge" || string(rec.calls[1].conf) != string(added) {
		t.Fatalf("calls %+v; want a DEL of bridge with the ADD config", rec.calls[1:])
	}
	if _, err := os.Stat(filepath.Join(n.dataDir, "c1")); !os.IsNotExist(err) {
		t.Errorf("stored config after DEL: %v; want it gone", err)
	}
	if err := p.Del(ctx, n.args("c1", "")); err != nil || len(rec.calls) != 2 {
		t.Errorf("second DEL: %v, calls %+v; want success and no delegate call", err, rec.calls[2:])
	}
}

// TestDelFlannelStored: a pod that flannel's plugin added is deleted with flannel's stored
// configuration (the same file format, in the same default place).
func TestDelFlannelStored(t *testing.T) {
	n := newNode(t)
	flannel := `{"cniVersion":"0.3.1","hairpinMode":true,"ipMasq":false,"ipam":{"ranges":[[{"subnet":"10.244.1.0/24"}]],` +
		`"routes":[{"dst":"10.244.0.0/16"}],"type":"host-local"},"isDefaultGateway":true,"isGateway":true,"mtu":1450,"name":"cbr0","type":"bridge"}`
	if err := os.MkdirAll(n.dataDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(n.dataDir, "f1"), []byte(flannel), 0o600); err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	p := &Plugin{OS: Linux, Delegator: rec}
	if err := p.Check(context.Background(), n.args("f1", `,"prevResult":{"cniVersion":"1.1.0"}`)); err != nil {
		t.Fatal(err)
	}
	if err := p.Del(context.Background(), n.args("f1", "")); err != nil {
		t.Fatal(err)
	}
	if len(rec.calls) != 2 || string(rec.calls[1].conf) != flannel {
		t.Errorf("calls %+v; want CHECK, then DEL with flannel's config verbatim", rec.calls)
	}
}

// TestDelUnreadableStored: a stored configuration that cannot be parsed does not block the
// pod's deletion forever (flannel's behaviour); it is left for a person to look at.
func TestDelUnreadableStored(t *testing.T) {
	n := newNode(t)
	if err := os.MkdirAll(n.dataDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(n.dataDir, "c1"), []byte(`{"type":`), 0o600); err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	var log strings.Builder
	p := &Plugin{OS: Linux, Delegator: rec, Log: &log}
	if err := p.Del(context.Background(), n.args("c1", "")); err != nil || len(rec.calls) != 0 {
		t.Errorf("DEL: %v, calls %+v; want success without a delegate call", err, rec.calls)
	}
	if !strings.Contains(log.String(), filepath.Join(n.dataDir, "c1")) {
		t.Errorf("log %q does not name the stored file", log.String())
	}
}

func TestCheck(t *testing.T) {
	n := newNode(t)
	rec := &recorder{}
	p := &Plugin{OS: Linux, Delegator: rec}
	ctx := context.Background()
	if _, err := p.Add(ctx, n.args("c1", "")); err != nil {
		t.Fatal(err)
	}
	prev := `,"prevResult":{"cniVersion":"1.1.0","ips":[{"address":"10.244.1.2/24"}]}`
	if err := p.Check(ctx, n.args("c1", prev)); err != nil {
		t.Fatal(err)
	}
	var got map[string]json.RawMessage
	if err := json.Unmarshal(rec.calls[1].conf, &got); err != nil {
		t.Fatal(err)
	}
	if rec.calls[1].command != "CHECK" || string(got["prevResult"]) != `{"cniVersion":"1.1.0","ips":[{"address":"10.244.1.2/24"}]}` ||
		string(got["cniVersion"]) != `"1.1.0"` || string(got["name"]) != `"weftnet"` {
		t.Errorf("CHECK delegate config %s; want the stored one with prevResult", rec.calls[1].conf)
	}

	// IPv6 turned on since: the container's IPv4 address is still right.
	n.writeEnv(fullEnv + "FLANNEL_IPV6_NETWORK=fd00::/56\nFLANNEL_IPV6_SUBNET=fd00:0:0:1::1/64\n")
	if err := p.Check(ctx, n.args("c1", prev)); err != nil {
		t.Errorf("CHECK after IPv6 was added: %v", err)
	}

	n.writeEnv(strings.Replace(fullEnv, "10.244.1.1/24", "10.244.9.1/24", 1))
	err := p.Check(ctx, n.args("c1", prev))
	wantCode(t, "CHECK after the subnet changed", err, CodeSubnetChanged, n.subnetFile, "10.244.1.0/24", "10.244.9.0/24")

	n.writeEnv(fullEnv[:20])
	wantCode(t, "CHECK with a half-written subnet.env", p.Check(ctx, n.args("c1", prev)), types.ErrDecodingFailure, n.subnetFile)
	n.removeEnv()
	wantCode(t, "CHECK without subnet.env", p.Check(ctx, n.args("c1", prev)), types.ErrTryAgainLater, n.subnetFile)
	wantCode(t, "CHECK of an unknown container", p.Check(ctx, n.args("c2", prev)), types.ErrUnknownContainer, "c2", n.dataDir)
	if len(rec.calls) != 3 {
		t.Errorf("%d delegate calls; want ADD and two CHECKs that passed", len(rec.calls))
	}
}

func TestAddErrors(t *testing.T) {
	n := newNode(t)
	rec := &recorder{}
	p := &Plugin{OS: Linux, Delegator: rec}
	ctx := context.Background()

	n.removeEnv()
	_, err := p.Add(ctx, n.args("c1", ""))
	wantCode(t, "ADD without subnet.env", err, types.ErrTryAgainLater, n.subnetFile, "weftd")
	n.writeEnv(fullEnv[:len(fullEnv)-len("FLANNEL_IPMASQ=true\n")])
	_, err = p.Add(ctx, n.args("c1", ""))
	wantCode(t, "ADD with a half-written subnet.env", err, types.ErrDecodingFailure, n.subnetFile, "FLANNEL_IPMASQ")
	_, err = p.Add(ctx, Args{ContainerID: "c1", StdinData: []byte(`{"name":"n","delegate":{"ipam":{}}}`)})
	wantCode(t, "ADD with a bad config", err, types.ErrInvalidNetworkConfig, "delegate.ipam")
	if len(rec.calls) != 0 {
		t.Fatalf("delegate calls %+v; want none", rec.calls)
	}
	if _, err := os.Stat(n.dataDir); !os.IsNotExist(err) {
		t.Errorf("data directory: %v; want nothing stored", err)
	}

	// A failing delegate: its code is kept, and the stored config is there for the DEL
	// that the runtime sends next.
	n.writeEnv(fullEnv)
	rec.err = types.NewError(types.ErrInvalidNetworkConfig, "bridge said no", "")
	_, err = p.Add(ctx, n.args("c1", ""))
	wantCode(t, "ADD with a failing delegate", err, types.ErrInvalidNetworkConfig, "delegate bridge ADD", "bridge said no")
	n.stored("c1")
	rec.err = fmt.Errorf("exec: not found")
	_, err = p.Add(ctx, n.args("c2", ""))
	wantCode(t, "ADD with a missing delegate", err, types.ErrInternal, "delegate bridge ADD", "not found")
}

func TestStatus(t *testing.T) {
	n := newNode(t)
	p := &Plugin{OS: Linux, Delegator: &recorder{}}
	ctx := context.Background()
	if err := p.Status(ctx, n.args("", "")); err != nil {
		t.Fatal(err)
	}
	n.writeEnv("FLANNEL_NETWORK=10.244.0.0/16\n")
	wantCode(t, "STATUS with a half-written subnet.env", p.Status(ctx, n.args("", "")), CodeNotAvailable, n.subnetFile)
	n.removeEnv()
	wantCode(t, "STATUS without subnet.env", p.Status(ctx, n.args("", "")), CodeNotAvailable, n.subnetFile, "not written")

	n.writeEnv(fullEnv)
	if err := os.WriteFile(filepath.Join(filepath.Dir(n.subnetFile), hnsfile.NetworkFile), []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := p.Status(ctx, n.args("", "")); err != nil {
		t.Errorf("STATUS on Linux with a bad %s: %v; want it ignored", hnsfile.NetworkFile, err)
	}
	p.OS = Windows
	wantCode(t, "STATUS on Windows with a bad "+hnsfile.NetworkFile, p.Status(ctx, n.args("", "")), CodeNotAvailable, hnsfile.NetworkFile)
}

// TestWindowsAdd: on Windows weftd's source VIP file makes the delegate win-overlay with the
// VIP kept out of its range, and the configuration is stored under the sandbox's ID.
func TestWindowsAdd(t *testing.T) {
	n := newNode(t)
	vip := `{"cniVersion":"0.2.0","ip4":{"ip":"10.244.1.254/24"}}`
	if err := os.WriteFile(filepath.Join(filepath.Dir(n.subnetFile), hnsfile.SourceVIPFile), []byte(vip), 0o644); err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	p := &Plugin{OS: Windows, Delegator: rec}
	a := n.args("c1", "")
	a.Netns = "container:sandbox1"
	if _, err := p.Add(context.Background(), a); err != nil {
		t.Fatal(err)
	}
	if len(rec.calls) != 1 || rec.calls[0].plugin != "win-overlay" {
		t.Fatalf("calls %+v; want an ADD of win-overlay", rec.calls)
	}
	sameJSON(t, n.stored("sandbox1"), `{"cniVersion":"1.1.0","name":"weftnet","type":"win-overlay","ipMasq":true,
		"ipMasqNetwork":"10.244.0.0/16","ipam":{"type":"host-local",
		"ranges":[[{"subnet":"10.244.1.0/24","rangeStart":"10.244.1.2","rangeEnd":"10.244.1.253"}]]}}`)
}

func TestStoreID(t *testing.T) {
	for _, tc := range []struct {
		goos               OS
		containerID, netns string
		want               string // "" for an error
	}{
		{Linux, "abc", "/var/run/netns/x", "abc"},
		{Linux, "abc", "container:def", "abc"},
		{Windows, "abc", "container:def", "def"},
		{Windows, "abc", "none", "abc"},
		{Windows, "abc", "", "abc"},
		{Windows, "abc", "8d3b6c2e-6a5c-4e0e-9d1c-2f1f6a3b9e10", "abc"},
		{Windows, "abc", "container:../x", ""},
		{Windows, "abc", "container:", ""},
		{Linux, "..", "", ""},
		{Linux, "a/b", "", ""},
		{Linux, `a\b`, "", ""},
		{Linux, "", "", ""},
	} {
		got, err := storeID(tc.goos, tc.containerID, tc.netns)
		if tc.want == "" {
			if err == nil {
				t.Errorf("storeID(%s, %q, %q) = %q; want an error", tc.goos, tc.containerID, tc.netns, got)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("storeID(%s, %q, %q) = %q, %v; want %q", tc.goos, tc.containerID, tc.netns, got, err, tc.want)
		}
	}
}

// TestWindowsAPIVersion: a pod in containerd's namespace (CNI_NETNS a GUID) is refused at
// once, naming apiVersion, when win-overlay or win-bridge would take their HNS v1 path; with
// "apiVersion": 2, dockershim's "none", or another delegate, it goes to the delegate.
func TestWindowsAPIVersion(t *testing.T) {
	const guid = "8d3b6c2e-6a5c-4e0e-9d1c-2f1f6a3b9e10"
	for _, tc := range []struct {
		netns, delegate string
		refused         bool
	}{
		{guid, `{"type":"win-overlay"}`, true},
		{guid, `{"type":"win-bridge","apiVersion":1}`, true},
		{strings.ToUpper(guid), `{"type":"win-overlay","apiVersion":"2"}`, true},
		{guid, `{"type":"win-overlay","apiVersion":2}`, false},
		{guid, `{"type":"win-bridge","apiVersion":2}`, false},
		{"none", `{"type":"win-overlay"}`, false},
		{"container:sandbox1", `{"type":"win-overlay"}`, false},
		{guid, `{"type":"sdnoverlay"}`, false},
		{guid + "0", `{"type":"win-overlay"}`, false},
	} {
		n := newNode(t)
		rec := &recorder{}
		p := &Plugin{OS: Windows, Delegator: rec}
		a := n.args("c1", `,"delegate":`+tc.delegate)
		a.Netns = tc.netns
		_, err := p.Add(context.Background(), a)
		what := fmt.Sprintf("ADD in %s with %s", tc.netns, tc.delegate)
		if !tc.refused {
			if err != nil || len(rec.calls) != 1 {
				t.Errorf("%s: %v, delegate calls %+v; want one ADD", what, err, rec.calls)
			}
			continue
		}
		wantCode(t, what, err, types.ErrInvalidNetworkConfig, "delegate.apiVersion", `"apiVersion": 2`, tc.netns)
		if len(rec.calls) != 0 {
			t.Errorf("%s: delegate calls %+v; want none", what, rec.calls)
		}
		if _, err := os.Stat(filepath.Join(n.dataDir, "c1")); !os.IsNotExist(err) {
			t.Errorf("%s: stored config: %v; want none", what, err)
		}
	}
}
