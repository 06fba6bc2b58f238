// Package install puts weft's CNI plugin and its configuration onto a node: `weft install`,
// what the init container of weft's Linux DaemonSet runs, as flannel's image runs cp. The
// image holds no shell and no cp, only weft's static binaries, so the plugin installs
// itself.
//
// The runtime may run the plugin or read the configuration at any moment: each file is
// written next to its place, synced and renamed over it (internal/atomicfile), so it is seen
// whole or not at all, and a plugin binary being run is never written to. A file that
// already holds the right bytes and mode is left alone, so a restarted init container
// changes nothing. The configuration is checked before anything is written: a broken
// ConfigMap stops the init container and leaves the node's working configuration as it
// was, instead of failing every pod the runtime starts afterwards.
//
// Windows nodes install with dist/windows/install-weftd.ps1 -CNIOnly instead.
package install

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/containernetworking/cni/libcni"

	"github.com/weftnet/weft/cni"
	"github.com/weftnet/weft/internal/atomicfile"
)

// Where a runtime looks for plugins and configurations unless told otherwise, and the names
// weft's take there.
const (
	DefaultBinDir   = "/opt/cni/bin"
	DefaultConfDir  = "/etc/cni/net.d"
	DefaultConfName = "10-weft.conflist"
	PluginName      = "weft"
)

// DisabledSuffix is appended to the name of a configuration set aside (Options.SetAside).
// The runtime reads only files ending in .conf, .conflist or .json; flannel's own
// installer writes its configuration again on a rollback.
const DisabledSuffix = ".disabled-by-weft"

// Modes of the installed files.
const (
	pluginMode fs.FileMode = 0o755
	confMode   fs.FileMode = 0o644
)

// Options say what to install where.
type Options struct {
	// Plugin is the plugin binary to install; "" is the running program, which is how
	// `weft install` uses it.
	Plugin string
	// Conf is the CNI configuration list to install (the ConfigMap's cni-conf.json).
	Conf string
	// BinDir and ConfDir are the runtime's directories, as mounted where this runs.
	BinDir  string
	ConfDir string
	// ConfName is the configuration's file name in ConfDir.
	ConfName string
	// SetAside are configurations in ConfDir that would win over weft's (the runtime
	// takes the first by name): each is renamed with DisabledSuffix once weft's is in
	// place.
	SetAside []string
}

// DefaultOptions installs into the runtime's default directories and sets flannel's
// configuration aside. Conf has no default.
func DefaultOptions() Options {
	return Options{BinDir: DefaultBinDir, ConfDir: DefaultConfDir, ConfName: DefaultConfName, SetAside: []string{"10-flannel.conflist"}}
}

// AddFlags registers the options' flags on fs.
func (o *Options) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.Conf, "conf", o.Conf, "the CNI configuration list to install (required)")
	fs.StringVar(&o.BinDir, "bin-dir", o.BinDir, "the runtime's plugin directory, where the plugin goes")
	fs.StringVar(&o.ConfDir, "conf-dir", o.ConfDir, "the runtime's configuration directory, where the configuration goes")
	fs.StringVar(&o.ConfName, "conf-name", o.ConfName, "the configuration's file name in --conf-dir")
	fs.Func("set-aside", fmt.Sprintf("comma-separated configurations in --conf-dir to rename with %s once weft's is in place (default %q)",
		DisabledSuffix, strings.Join(o.SetAside, ",")), func(v string) error {
		o.SetAside = nil
		for _, name := range strings.Split(v, ",") {
			if name = strings.TrimSpace(name); name != "" {
				o.SetAside = append(o.SetAside, name)
			}
		}
		return nil
	})
}

// validate checks the options that name files: file names must be plain names, since they
// are joined to directories.
func (o Options) validate() error {
	if o.Conf == "" {
		return errors.New("--conf: no CNI configuration to install")
	}
	if o.BinDir == "" || o.ConfDir == "" {
		return fmt.Errorf("--bin-dir=%q, --conf-dir=%q: both are needed", o.BinDir, o.ConfDir)
	}
	for _, n := range append([]string{o.ConfName}, o.SetAside...) {
		if n == "" || n != filepath.Base(n) || n == "." || n == ".." {
			return fmt.Errorf("%q: not a file name", n)
		}
	}
	if !isConfName(o.ConfName) {
		return fmt.Errorf("--conf-name=%q: the runtime reads only .conflist, .conf and .json files", o.ConfName)
	}
	return nil
}

// isConfName says whether the runtime would read a file of that name as a configuration.
func isConfName(name string) bool {
	switch filepath.Ext(name) {
	case ".conflist", ".conf", ".json":
		return true
	}
	return false
}

// Run installs the plugin into BinDir and the configuration into ConfDir, in that order (a
// configuration is never there before its plugin), then sets the other configurations
// aside. Every change, and every file found already in place, is logged.
func Run(o Options, log *slog.Logger) error {
	if err := o.validate(); err != nil {
		return err
	}
	plugin := o.Plugin
	if plugin == "" {
		self, err := os.Executable()
		if err != nil {
			return fmt.Errorf("finding the plugin binary (this program): %w", err)
		}
		plugin = self
	}
	bin, err := os.ReadFile(plugin)
	if err != nil {
		return fmt.Errorf("reading the plugin: %w", err)
	}
	conf, err := os.ReadFile(o.Conf)
	if err != nil {
		return fmt.Errorf("reading the CNI configuration: %w", err)
	}
	if err := checkConf(conf); err != nil {
		return fmt.Errorf("CNI configuration %s: %w", o.Conf, err)
	}

	if err := put(filepath.Join(o.BinDir, PluginName), bin, pluginMode, log); err != nil {
		return err
	}
	if err := put(filepath.Join(o.ConfDir, o.ConfName), conf, confMode, log); err != nil {
		return err
	}
	for _, name := range o.SetAside {
		if name == o.ConfName {
			continue
		}
		from := filepath.Join(o.ConfDir, name)
		switch err := os.Rename(from, from+DisabledSuffix); {
		case err == nil:
			log.Info("set aside", "file", from, "as", from+DisabledSuffix)
		case errors.Is(err, fs.ErrNotExist):
		default:
			return fmt.Errorf("setting %s aside: %w", from, err)
		}
	}
	return nil
}

// checkConf checks a configuration list as the runtime will read it, and its weft entry as
// the plugin will (with the list's name and cniVersion, which the runtime adds).
func checkConf(data []byte) error {
	list, err := libcni.NetworkConfFromBytes(data)
	if err != nil {
		return err
	}
	for _, p := range list.Plugins {
		if p.Network.Type != PluginName {
			continue
		}
		p, err := libcni.InjectConf(p, map[string]any{"name": list.Name, "cniVersion": list.CNIVersion})
		if err != nil {
			return fmt.Errorf("plugin %s: %w", PluginName, err)
		}
		if _, err := cni.ParseConfig(p.Bytes); err != nil {
			return fmt.Errorf("plugin %s: %w", PluginName, err)
		}
		return nil
	}
	return fmt.Errorf("no plugin of type %q in network %q", PluginName, list.Name)
}

// put writes data to path with mode perm, atomically, unless the file already holds
// exactly that.
func put(path string, data []byte, perm fs.FileMode, log *slog.Logger) error {
	if fi, err := os.Stat(path); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm() == perm {
		if have, err := os.ReadFile(path); err == nil && bytes.Equal(have, data) {
			log.Info("already installed", "file", path)
			return nil
		}
	}
	if err := atomicfile.Write(path, data, perm); err != nil {
		return fmt.Errorf("installing %s: %w", path, err)
	}
	log.Info("installed", "file", path, "bytes", len(data), "mode", perm)
	return nil
}
