package winnode

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weftnet/weft/e2e/cluster"
	"github.com/weftnet/weft/internal/buildinfo"
	"github.com/weftnet/weft/internal/hnssim"
	"github.com/weftnet/weft/internal/winetest"
	"github.com/weftnet/weft/windows"
	"github.com/weftnet/weft/windows/hnstest"
)

// Path is a Linux path as a Windows program under Wine names it (drive Z: is /).
func Path(p string) string { return `Z:` + strings.ReplaceAll(p, "/", `\`) }

// SubnetFile is where weft's Windows DaemonSet has weftd.exe write subnet.env, flannel's
// path on a Windows node.
const SubnetFile = `C:\run\flannel\subnet.env`

// Node is a Windows node: a node of e2e/cluster with a Wine prefix and, once ServeHNS has
// run, an HNS.
type Node struct {
	*cluster.Node
	tb testing.TB
	// Prefix is the node's Wine prefix, whose wineserver starts in the node's namespace.
	Prefix string
	// WinSubnetFile is subnet.env as the node's programs name it.
	WinSubnetFile string
	HNS           *hnstest.HNS
	// Host is host-gw's simulated host, or nil.
	Host   *hnstest.Host
	Server *hnssim.Server
	// Env is Wine's environment for the node's programs.
	Env []string
	// Version is the HNS version ServeHNS's HNS reports; zero: hnstest's default.
	Version windows.Version
}

// Wrap makes n a Windows node with a Wine prefix of its own (winetest.Prefix), stopped and
// removed when tb ends; ServeHNS gives it an HNS. Wrap it after the cluster is made, so that
// its wineserver is stopped before the namespaces go.
func Wrap(tb testing.TB, n *cluster.Node, repo string) *Node {
	tb.Helper()
	prefix := winetest.Prefix(tb, repo, "wine-node-")
	return &Node{Node: n, tb: tb, Prefix: prefix, WinSubnetFile: Path(n.SubnetFile)}
}

// ServeHNS gives the node a new, empty HNS (as a reboot of a node without persistent
// networks would), with the same IDs and DR MACs as the last: they come from a sequence.
// host, if not nil, is the node's simulated host (host-gw), which the HNS moves the node's
// address on when it makes an L2Bridge network and which the programs' IP Helper calls
// reach through tools/wine's iphlpapi.dll (Wine 8's lacks GetIpInterfaceEntry and the route
// writes).
func (w *Node) ServeHNS(host *hnstest.Host) {
	w.tb.Helper()
	w.HNS = hnstest.New(hnstest.Options{ManagementIP: w.IP, Blip: 300 * time.Millisecond, Host: host, Version: w.Version})
	w.Host = host
	l, err := w.Listen("127.0.0.1:0")
	if err != nil {
		w.tb.Fatal(err)
	}
	w.Server = hnssim.New(w.HNS, slog.New(slog.NewTextHandler(io.Discard, nil)))
	go func() { _ = w.Server.Serve(l) }()
	w.tb.Cleanup(func() { l.Close() })
	overrides := "computenetwork,vmcompute=n"
	if host != nil {
		overrides = "computenetwork,vmcompute,iphlpapi=n"
	}
	w.Env = []string{"WINEPREFIX=" + w.Prefix, "WINEDEBUG=-all", "WINEDLLOVERRIDES=" + overrides,
		"WEFT_HNS_ADDR=" + l.Addr().String()}
}

// Wine is the command line that runs exe under Wine in the node with args.
func (w *Node) Wine(exe string, args ...string) []string {
	argv := append([]string{"env"}, w.Env...)
	return append(append(argv, winetest.Wine64, exe), args...)
}

// DriveC is a path of the node's drive C: as a path here.
func (w *Node) DriveC(winPath string) string {
	rel := strings.TrimPrefix(strings.ReplaceAll(winPath, `\`, "/"), "C:/")
	return filepath.Join(w.Prefix, "drive_c", rel)
}

// UseSubnetFile has the node's programs write and read subnet.env at SubnetFile, on its
// drive C:, as a real node keeps it.
func (w *Node) UseSubnetFile() {
	w.WinSubnetFile = SubnetFile
	w.SubnetFile = w.DriveC(SubnetFile)
}

// InstallPlugins copies the programs named exes of the directory programs into C:\opt\cni\bin,
// as weft's Windows DaemonSet installs the CNI plugins.
func (w *Node) InstallPlugins(programs string, exes ...string) {
	w.tb.Helper()
	w.install(programs, `C:\opt\cni\bin`, exes...)
}

// InstallKubeProxy copies kube-proxy.exe (exe) to C:\k\kube-proxy.exe, where weft's kube-proxy
// DaemonSet runs it, as Kubernetes' Windows node archive puts it on a node.
func (w *Node) InstallKubeProxy(exe string) {
	w.tb.Helper()
	if filepath.Base(exe) != "kube-proxy.exe" {
		w.tb.Fatalf("%s is not kube-proxy.exe", exe)
	}
	w.install(filepath.Dir(exe), `C:\k`, "kube-proxy.exe")
}

// install copies the programs named exes of the directory programs into the node's winDir.
func (w *Node) install(programs, winDir string, exes ...string) {
	w.tb.Helper()
	dir := w.DriveC(winDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		w.tb.Fatal(err)
	}
	for _, exe := range exes {
		if out, err := exec.Command("cp", filepath.Join(programs, exe), dir).CombinedOutput(); err != nil {
			w.tb.Fatalf("installing %s in %s: %v\n%s", exe, winDir, err, out)
		}
	}
}

// InstallConflist puts the CNI configuration list where the runtime reads it.
func (w *Node) InstallConflist(conf []byte) {
	w.tb.Helper()
	dir := w.DriveC(`C:\etc\cni\net.d`)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		w.tb.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "10-weft.conflist"), conf, 0o644); err != nil {
		w.tb.Fatal(err)
	}
}

// PodNetwork is what one backend's pods get on a Windows node: the vxlan backend's is the
// Overlay network flannel.4096 and win-overlay, host-gw's the L2Bridge network cbr0 and
// win-bridge.
type PodNetwork struct {
	// Network is the HNS network, and the CNI network the delegate is named after.
	Network string
	// Delegate is the CNI plugin weft.exe hands the pod to: win-overlay or win-bridge.
	Delegate string
	Overlay  bool
}

// ShippedConflist is dist/cni/10-weft-windows.conflist of repo, for the backend's network
// and delegate as the Helm chart makes it for host-gw (its name and delegate type are all
// that differ).
func ShippedConflist(repo string, b PodNetwork) ([]byte, error) {
	data, err := os.ReadFile(filepath.Join(repo, "dist", "cni", "10-weft-windows.conflist"))
	if err != nil || b.Overlay {
		return data, err
	}
	var list map[string]any
	if err := json.Unmarshal(data, &list); err != nil {
		return nil, fmt.Errorf("10-weft-windows.conflist: %w", err)
	}
	list["name"] = b.Network
	list["plugins"].([]any)[0].(map[string]any)["delegate"].(map[string]any)["type"] = b.Delegate
	return json.Marshal(list)
}

// BuildPrograms builds the Windows programs of the pod and node tests into .cache/wine-bin
// of the repository and returns that directory (Go's build cache makes a rebuild of
// unchanged sources a link at most): weftd.exe, weft.exe and weftctl.exe from this module,
// win-overlay.exe, win-bridge.exe and host-local.exe of containernetworking/plugins from
// tools/go.mod, and wincni.exe, the containerd-shaped pod runner, from tools/wincni.
func BuildPrograms(repo string) (string, error) {
	dir := filepath.Join(repo, ".cache", "wine-bin")
	outDir := dir + string(filepath.Separator)
	for _, b := range []struct {
		dir  string
		args []string
	}{
		{repo, []string{"-tags=" + buildinfo.Tags, "-o", outDir, "./cmd/weftd", "./cmd/weft", "./cmd/weftctl"}},
		{filepath.Join(repo, "tools"), []string{"-mod=readonly", "-o", outDir,
			"github.com/containernetworking/plugins/plugins/main/windows/win-overlay",
			"github.com/containernetworking/plugins/plugins/main/windows/win-bridge",
			"github.com/containernetworking/plugins/plugins/ipam/host-local"}},
		{filepath.Join(repo, "tools", "wincni"), []string{"-mod=readonly", "-o", filepath.Join(dir, "wincni.exe"), "."}},
	} {
		args := append([]string{"build"}, b.args...)
		cmd := exec.Command("go", args...)
		cmd.Dir = b.dir
		cmd.Env = append(os.Environ(), "GOOS=windows", "GOARCH=amd64", "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("go %s in %s (GOOS=windows): %w\n%s", strings.Join(args, " "), b.dir, err, out)
		}
	}
	return dir, nil
}

// HostOf is the host of a node n before HNS touches it, as Wine shows the namespace's
// interfaces (Go's net package names them through Wine's own iphlpapi): the loopback and
// eth0, each with its route, and the default route via the underlay.
func HostOf(n *cluster.Node) (*hnstest.Host, error) {
	out, err := n.Exec("cat", "/sys/class/net/eth0/ifindex")
	if err != nil {
		return nil, err
	}
	var eth0 uint32
	if _, err := fmt.Sscanf(out, "%d", &eth0); err != nil {
		return nil, fmt.Errorf("node %s: eth0's index %q: %w", n.Name, out, err)
	}
	pfx := netip.MustParsePrefix
	host := hnstest.NewHost(
		windows.Interface{Index: 1, Name: "lo", Prefixes: []netip.Prefix{pfx("127.0.0.1/8")}},
		windows.Interface{Index: eth0, Name: "eth0", Prefixes: []netip.Prefix{netip.PrefixFrom(n.IP, 24)}})
	for _, r := range []windows.HostRoute{
		{Dst: pfx("127.0.0.0/8"), NextHop: netip.IPv4Unspecified(), IfIndex: 1, Metric: 256},
		{Dst: pfx("0.0.0.0/0"), NextHop: netip.MustParseAddr(cluster.UnderlayGateway), IfIndex: eth0, Metric: 256},
	} {
		if err := host.AddRoute(r); err != nil {
			return nil, err
		}
	}
	return host, nil
}
