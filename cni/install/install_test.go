package install

import (
	"flag"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/weftnet/weft/internal/atomicfile"
)

const testConf = `{"name": "cbr0", "cniVersion": "0.3.1", "plugins": [
  {"type": "weft", "delegate": {"hairpinMode": true, "isDefaultGateway": true}},
  {"type": "portmap", "capabilities": {"portMappings": true}}]}`

// node is a scratch node: the image's files (a plugin and a configuration) and the
// runtime's directories.
type node struct {
	opts           Options
	binDir, netDir string
}

func newNode(t *testing.T, plugin, conf string) node {
	t.Helper()
	root := t.TempDir()
	o := DefaultOptions()
	o.Plugin, o.Conf = filepath.Join(root, "image-weft"), filepath.Join(root, "cni-conf.json")
	o.BinDir, o.ConfDir = filepath.Join(root, "opt/cni/bin"), filepath.Join(root, "etc/cni/net.d")
	write(t, o.Plugin, plugin, 0o700)
	write(t, o.Conf, conf, 0o600)
	return node{opts: o, binDir: o.BinDir, netDir: o.ConfDir}
}

// write writes a file of a scratch node, making its directories.
func write(t *testing.T, path, data string, perm fs.FileMode) {
	t.Helper()
	if err := atomicfile.Write(path, []byte(data), perm); err != nil {
		t.Fatal(err)
	}
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// state is what the runtime's directories hold: name, mode and content of every file.
func (n node) state(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, dir := range []string{n.binDir, n.netDir} {
		entries, err := os.ReadDir(dir)
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		for _, e := range entries {
			fi, err := e.Info()
			if err != nil {
				t.Fatal(err)
			}
			data, err := os.ReadFile(filepath.Join(dir, e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, filepath.Base(dir)+"/"+e.Name()+" "+fi.Mode().String()+" "+string(data))
		}
	}
	return out
}

// TestRun: a fresh node gets the plugin and the configuration with their modes, flannel's
// configuration set aside; a second run changes nothing and rewrites nothing; a new
// plugin replaces the old one, and a file with the wrong mode is put right.
func TestRun(t *testing.T) {
	n := newNode(t, "plugin v1", testConf)
	write(t, filepath.Join(n.netDir, "10-flannel.conflist"), `{"name":"cbr0","plugins":[{"type":"flannel"}]}`, 0o644)
	write(t, filepath.Join(n.netDir, "99-other.conflist"), `{}`, 0o644)
	if err := Run(n.opts, quiet()); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"bin/weft -rwxr-xr-x plugin v1",
		`net.d/10-flannel.conflist.disabled-by-weft -rw-r--r-- {"name":"cbr0","plugins":[{"type":"flannel"}]}`,
		"net.d/10-weft.conflist -rw-r--r-- " + testConf,
		"net.d/99-other.conflist -rw-r--r-- {}",
	}
	if got := n.state(t); !slices.Equal(got, want) {
		t.Fatalf("after the first run:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	before, err := os.Stat(filepath.Join(n.binDir, PluginName))
	if err != nil {
		t.Fatal(err)
	}
	if err := Run(n.opts, quiet()); err != nil {
		t.Fatalf("second run: %v", err)
	}
	if got := n.state(t); !slices.Equal(got, want) {
		t.Fatalf("after the second run:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	after, err := os.Stat(filepath.Join(n.binDir, PluginName))
	if err != nil {
		t.Fatal(err)
	}
	if !os.SameFile(before, after) {
		t.Error("the second run replaced a plugin that was already in place")
	}

	write(t, n.opts.Plugin, "plugin v2", 0o700)
	if err := os.Chmod(filepath.Join(n.netDir, DefaultConfName), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Run(n.opts, quiet()); err != nil {
		t.Fatalf("upgrade: %v", err)
	}
	want[0] = "bin/weft -rwxr-xr-x plugin v2"
	if got := n.state(t); !slices.Equal(got, want) {
		t.Fatalf("after the upgrade:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestRunRefusesBadConf: a configuration the runtime or the plugin would refuse installs
// nothing, and the node keeps what it had.
func TestRunRefusesBadConf(t *testing.T) {
	for _, tc := range []struct{ name, conf, err string }{
		{"not JSON", `{"name": "cbr0", "plugins": [`, "error parsing configuration list"},
		{"no weft", `{"name": "cbr0", "cniVersion": "0.3.1", "plugins": [{"type": "flannel"}]}`, `no plugin of type "weft"`},
		{"plugin refuses", `{"name": "cbr0", "cniVersion": "0.3.1", "plugins": [{"type": "weft", "delegate": {"name": "x"}}]}`, "delegate.name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newNode(t, "plugin v2", tc.conf)
			flannel := `{"name":"cbr0","plugins":[{"type":"flannel"}]}`
			write(t, filepath.Join(n.binDir, PluginName), "plugin v1", 0o755)
			write(t, filepath.Join(n.netDir, "10-flannel.conflist"), flannel, 0o644)
			before := n.state(t)
			err := Run(n.opts, quiet())
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("error %v, want one saying %q", err, tc.err)
			}
			if got := n.state(t); !slices.Equal(got, before) {
				t.Errorf("the node changed:\n%s\nwas\n%s", strings.Join(got, "\n"), strings.Join(before, "\n"))
			}
		})
	}
}

func TestOptions(t *testing.T) {
	parse := func(args ...string) (Options, error) {
		o := DefaultOptions()
		fs := flag.NewFlagSet("install", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		o.AddFlags(fs)
		if err := fs.Parse(args); err != nil {
			return o, err
		}
		return o, o.validate()
	}
	o, err := parse("--conf=/etc/kube-flannel/cni-conf.json", "--bin-dir=/host/opt/cni/bin", "--set-aside=10-flannel.conflist, 10-calico.conflist,")
	if err != nil {
		t.Fatal(err)
	}
	if o.BinDir != "/host/opt/cni/bin" || o.ConfDir != DefaultConfDir || o.ConfName != DefaultConfName ||
		!slices.Equal(o.SetAside, []string{"10-flannel.conflist", "10-calico.conflist"}) {
		t.Errorf("options %+v", o)
	}
	for _, args := range [][]string{
		{},
		{"--conf=c", "--conf-name=../10-weft.conflist"},
		{"--conf=c", "--conf-name=10-weft.conflist.bak"},
		{"--conf=c", "--set-aside=a/b"},
		{"--conf=c", "--bin-dir="},
	} {
		if _, err := parse(args...); err == nil {
			t.Errorf("%q: no error", args)
		}
	}
}
