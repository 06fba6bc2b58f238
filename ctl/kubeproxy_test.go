package ctl

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weftnet/weft/windows/hnsfile"
)

// TestKubeProxyArgs: the network's name always, the source VIP on an overlay network only,
// and neither where kube-proxy's own command line has it already.
func TestKubeProxyArgs(t *testing.T) {
	overlay := hnsfile.Network{Name: "flannel.4096", Type: "Overlay", SourceVIP: netip.MustParseAddr("10.244.3.254")}
	bridge := hnsfile.Network{Name: "cbr0", Type: "L2Bridge"}
	for _, c := range []struct {
		name string
		n    hnsfile.Network
		args []string
		want []string
	}{
		{"overlay", overlay, []string{"--v=3"}, []string{"--v=3", "--network-name=flannel.4096", "--source-vip=10.244.3.254"}},
		{"l2bridge", bridge, []string{"--v=3"}, []string{"--v=3", "--network-name=cbr0"}},
		{"given", overlay, []string{"--network-name=other", "-source-vip", "10.1.1.1"}, []string{"--network-name=other", "-source-vip", "10.1.1.1"}},
		{"a value that looks like one", overlay, []string{"--hostname-override=--network-name"}, []string{"--hostname-override=--network-name", "--network-name=flannel.4096", "--source-vip=10.244.3.254"}},
	} {
		if got := kubeProxyArgs(c.n, c.args); !slices.Equal(got, c.want) {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}

// TestWaitNetwork: waitNetwork waits for hns.json and, on an overlay network, for
// sourceVip.json; it stops on a malformed file and when its context ends.
func TestWaitNetwork(t *testing.T) {
	dir := t.TempDir()
	subnetFile := filepath.Join(dir, "subnet.env")
	netPath, vipPath := hnsfile.Paths(subnetFile)
	go func() {
		time.Sleep(50 * time.Millisecond)
		if err := hnsfile.WriteNetwork(netPath, hnsfile.Network{Name: "flannel.4096", Type: hnsfile.Overlay}); err != nil {
			t.Error(err)
		}
		time.Sleep(50 * time.Millisecond)
		if err := hnsfile.WriteSourceVIP(vipPath, netip.MustParsePrefix("10.244.3.254/24")); err != nil {
			t.Error(err)
		}
	}()
	var log bytes.Buffer
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	n, err := waitNetwork(ctx, subnetFile, 10*time.Millisecond, &log)
	if err != nil || n.Name != "flannel.4096" || n.SourceVIP != netip.MustParseAddr("10.244.3.254") {
		t.Fatalf("waitNetwork: %+v, %v", n, err)
	}
	if !strings.Contains(log.String(), "waiting for weftd's hns.json") {
		t.Errorf("log %q: want it to say what it waits for", log.String())
	}

	if err := os.WriteFile(netPath, []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := waitNetwork(ctx, subnetFile, 10*time.Millisecond, &log); err == nil || !strings.Contains(err.Error(), "malformed") {
		t.Errorf("a malformed hns.json: %v, want an error saying so", err)
	}

	empty := filepath.Join(t.TempDir(), "subnet.env")
	short, stop := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer stop()
	if _, err := waitNetwork(short, empty, 10*time.Millisecond, &log); err == nil || !strings.Contains(err.Error(), "waiting for hns.json") {
		t.Errorf("no files, the context ends: %v", err)
	}
}

// helperEnv makes this test binary the program weftctl kube-proxy runs
// (TestKubeProxyHelper): it prints its arguments and exits with status 3.
const helperEnv = "WEFTCTL_TEST_KUBE_PROXY"

func TestKubeProxyHelper(t *testing.T) {
	if os.Getenv(helperEnv) == "" {
		t.Skip("the program of TestKubeProxy, not a test")
	}
	fmt.Println(strings.Join(os.Args[1:], " "))
	os.Exit(3)
}

// TestKubeProxy: weftctl kube-proxy runs the program with the network's flags added, passes
// its output on and exits with its status; without a program it is a usage error.
func TestKubeProxy(t *testing.T) {
	dir := t.TempDir()
	subnetFile := filepath.Join(dir, "subnet.env")
	netPath, _ := hnsfile.Paths(subnetFile)
	if err := hnsfile.WriteNetwork(netPath, hnsfile.Network{Name: "cbr0", Type: hnsfile.L2Bridge}); err != nil {
		t.Fatal(err)
	}
	t.Setenv(helperEnv, "1")
	var stdout, stderr bytes.Buffer
	code := Main(t.Context(), []string{"kube-proxy", "--subnet-file=" + subnetFile, "--", os.Args[0], "-test.run=^TestKubeProxyHelper$", "--", "--proxy-mode=kernelspace"}, &stdout, &stderr)
	if code != 3 || !strings.Contains(stdout.String(), "-test.run=^TestKubeProxyHelper$ -- --proxy-mode=kernelspace --network-name=cbr0\n") {
		t.Errorf("exit %d, output %q (%s); want 3 and the program's arguments with --network-name=cbr0", code, stdout.String(), stderr.String())
	}
	stdout.Reset()
	if code := Main(t.Context(), []string{"kube-proxy", "--subnet-file=" + subnetFile}, &stdout, &stderr); code != ExitUsage {
		t.Errorf("no program: exit %d, want %d", code, ExitUsage)
	}
}
