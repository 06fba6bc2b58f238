package cni

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/weftnet/weft/subnet"
)

// TestPluginInNetns runs the built weft binary as a runtime would, inside a "node" network
// namespace, with the real bridge and host-local plugins as delegates, on a "pod" namespace:
// ADD, CHECK, CHECK after the subnet changed, STATUS and ADD without subnet.env, and DEL
// without subnet.env. Root only; nothing outside the two namespaces and a temporary
// directory is touched.
func TestPluginInNetns(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: network namespaces")
	}
	repo := repoRoot(t)
	cniBin := delegatePlugins(t, repo)
	start := time.Now()
	weft := buildWeft(t, repo)
	t.Logf("built weft in %v", time.Since(start).Round(time.Millisecond))

	nodeNS, podNS := netns(t, "node"), netns(t, "pod")
	dir := t.TempDir()
	subnetFile := filepath.Join(dir, "run", "subnet.env")
	dataDir := filepath.Join(dir, "data")
	ipamDir := filepath.Join(dir, "ipam")
	writeEnv := func(sn string) {
		t.Helper()
		e := subnet.NewEnv(netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix(sn), netip.Prefix{}, netip.Prefix{}, 1400, true)
		if err := subnet.WriteEnv(subnetFile, e); err != nil {
			t.Fatal(err)
		}
	}
	writeEnv("10.244.7.0/24")
	conf := fmt.Sprintf(`{"cniVersion":"1.1.0","name":"weftit","type":"weft","subnetFile":%q,"dataDir":%q,
		"ipam":{"dataDir":%q},"delegate":{"isDefaultGateway":true}}`, subnetFile, dataDir, ipamDir)
	r := runner{t: t, weft: weft, cniBin: cniBin, nodeNS: nodeNS, podNS: podNS}

	out, cerr := r.run("ADD", "c1", conf)
	if cerr != nil {
		t.Fatalf("ADD: %v", cerr)
	}
	var res struct {
		IPs []struct {
			Address string `json:"address"`
			Gateway string `json:"gateway"`
		} `json:"ips"`
	}
	if err := json.Unmarshal(out, &res); err != nil || len(res.IPs) != 1 {
		t.Fatalf("ADD result %s: %v; want one address", out, err)
	}
	addr, err := netip.ParsePrefix(res.IPs[0].Address)
	if err != nil || addr.Masked() != netip.MustParsePrefix("10.244.7.0/24") || res.IPs[0].Gateway != "10.244.7.1" {
		t.Fatalf("ADD gave %s gateway %s; want an address of 10.244.7.0/24, gateway 10.244.7.1", res.IPs[0].Address, res.IPs[0].Gateway)
	}
	podLink := ipCmd(t, "-n", podNS, "-j", "addr", "show", "eth0")
	if !strings.Contains(podLink, `"mtu":1400`) || !strings.Contains(podLink, `"local":"`+addr.Addr().String()+`"`) {
		t.Errorf("pod eth0: %s; want MTU 1400 (FLANNEL_MTU) and %s", podLink, addr)
	}
	if routes := ipCmd(t, "-n", podNS, "route", "show", "default"); !strings.Contains(routes, "via 10.244.7.1") {
		t.Errorf("pod default route %q; want via 10.244.7.1 (isDefaultGateway)", routes)
	}
	if _, err := os.Stat(filepath.Join(dataDir, "c1")); err != nil {
		t.Errorf("stored delegate config: %v", err)
	}
	t.Logf("ADD: pod has %s", addr)

	checkConf := withKey(t, conf, "prevResult", out)
	if _, cerr := r.run("CHECK", "c1", checkConf); cerr != nil {
		t.Errorf("CHECK: %v", cerr)
	}
	if _, cerr := r.run("STATUS", "", conf); cerr != nil {
		t.Errorf("STATUS with subnet.env: %v", cerr)
	}

	writeEnv("10.244.8.0/24")
	_, cerr = r.run("CHECK", "c1", checkConf)
	wantCNIError(t, "CHECK after the subnet changed", cerr, CodeSubnetChanged, subnetFile, "10.244.7.0/24", "10.244.8.0/24")

	if err := os.Remove(subnetFile); err != nil {
		t.Fatal(err)
	}
	_, cerr = r.run("STATUS", "", conf)
	wantCNIError(t, "STATUS without subnet.env", cerr, CodeNotAvailable, subnetFile)
	_, cerr = r.run("ADD", "c2", conf)
	wantCNIError(t, "ADD without subnet.env", cerr, types.ErrTryAgainLater, subnetFile)

	if _, cerr := r.run("DEL", "c1", conf); cerr != nil {
		t.Fatalf("DEL without subnet.env: %v", cerr)
	}
	if out, err := exec.Command("ip", "-n", podNS, "link", "show", "eth0").CombinedOutput(); err == nil {
		t.Errorf("pod eth0 still there after DEL: %s", out)
	}
	if _, err := os.Stat(filepath.Join(dataDir, "c1")); !os.IsNotExist(err) {
		t.Errorf("stored delegate config after DEL: %v; want it gone", err)
	}
	if _, err := os.Stat(filepath.Join(ipamDir, "weftit", addr.Addr().String())); !os.IsNotExist(err) {
		t.Errorf("host-local reservation of %s after DEL: %v; want it released", addr.Addr(), err)
	}
	if _, cerr := r.run("DEL", "c1", conf); cerr != nil {
		t.Errorf("second DEL: %v", cerr)
	}
}

// runner runs the weft binary in the node namespace.
type runner struct {
	t                           *testing.T
	weft, cniBin, nodeNS, podNS string
}

// run runs one CNI command and returns its stdout, or the CNI error it printed.
func (r runner) run(command, containerID, conf string) ([]byte, *types.Error) {
	r.t.Helper()
	cmd := exec.Command("ip", "netns", "exec", r.nodeNS, r.weft)
	cmd.Env = []string{
		"CNI_COMMAND=" + command,
		"CNI_CONTAINERID=" + containerID,
		"CNI_NETNS=/var/run/netns/" + r.podNS,
		"CNI_IFNAME=eth0",
		"CNI_PATH=" + r.cniBin,
		"PATH=" + os.Getenv("PATH"),
	}
	if command == "STATUS" {
		cmd.Env = []string{"CNI_COMMAND=STATUS", "CNI_PATH=" + r.cniBin, "PATH=" + os.Getenv("PATH")}
	}
	cmd.Stdin = strings.NewReader(conf)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err == nil {
		return stdout.Bytes(), nil
	}
	var ce types.Error
	if jerr := json.Unmarshal(stdout.Bytes(), &ce); jerr != nil || ce.Msg == "" {
		r.t.Fatalf("weft %s: %v; stdout %q stderr %q: not a CNI error", command, err, stdout.String(), stderr.String())
	}
	return nil, &ce
}

func wantCNIError(t *testing.T, what string, ce *types.Error, code uint, in ...string) {
	t.Helper()
	if ce == nil {
		t.Fatalf("%s: success; want error code %d", what, code)
	}
	if ce.Code != code {
		t.Errorf("%s: code %d (%s); want %d", what, ce.Code, ce.Msg, code)
	}
	for _, s := range in {
		if !strings.Contains(ce.Msg, s) {
			t.Errorf("%s: %q does not say %q", what, ce.Msg, s)
		}
	}
	t.Logf("%s: code %d: %s", what, ce.Code, ce.Msg)
}

// withKey adds a top-level key to a JSON object.
func withKey(t *testing.T, conf, key string, value []byte) string {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(conf), &m); err != nil {
		t.Fatal(err)
	}
	m[key] = value
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

func ipCmd(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// netns makes a network namespace with its loopback up, deleted when the test ends.
func netns(t *testing.T, role string) string {
	t.Helper()
	name := fmt.Sprintf("weftcni-%d-%s", os.Getpid(), role)
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v: %s", name, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
			t.Errorf("ip netns del %s: %v: %s", name, err, out)
		}
	})
	ipCmd(t, "-n", name, "link", "set", "lo", "up")
	return name
}

// repoRoot is the module's root directory.
func repoRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil || len(bytes.TrimSpace(out)) == 0 {
		t.Fatalf("go env GOMOD: %v (%q)", err, out)
	}
	return filepath.Dir(string(bytes.TrimSpace(out)))
}

// delegatePlugins is the directory of the bridge and host-local plugins: $WEFT_CNI_BIN, else
// .cache/cni/bin, where tools/install-cni.sh puts them (it is run if they are missing).
func delegatePlugins(t *testing.T, repo string) string {
	t.Helper()
	have := func(dir string) bool {
		for _, p := range []string{"bridge", "host-local"} {
			if st, err := os.Stat(filepath.Join(dir, p)); err != nil || st.Mode().Perm()&0o111 == 0 {
				return false
			}
		}
		return true
	}
	if dir := os.Getenv("WEFT_CNI_BIN"); dir != "" {
		if !have(dir) {
			t.Fatalf("WEFT_CNI_BIN=%s lacks bridge or host-local", dir)
		}
		return dir
	}
	dir := filepath.Join(repo, ".cache", "cni", "bin")
	if !have(dir) {
		if out, err := exec.Command(filepath.Join(repo, "tools", "install-cni.sh"), dir).CombinedOutput(); err != nil {
			t.Skipf("CNI plugins missing and tools/install-cni.sh failed: %v: %s", err, out)
		}
	}
	return dir
}

// buildWeft builds cmd/weft into a temporary directory.
func buildWeft(t *testing.T, repo string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "weft")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/weft")
	cmd.Dir = repo
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building weft: %v: %s", err, out)
	}
	return bin
}
