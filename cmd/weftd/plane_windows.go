package main

import (
	"flag"
	"log/slog"
	"path/filepath"

	"github.com/weftnet/weft/backend"
	"github.com/weftnet/weft/daemon"
	"github.com/weftnet/weft/windows"
	"github.com/weftnet/weft/windows/hnsfile"
)

// planeFlags are the data plane's own flags on this OS.
type planeFlags struct {
	hnsPeers      windows.PeerMode
	sourceVIPFile string
}

func (f *planeFlags) addFlags(fs *flag.FlagSet) {
	fs.Func("hns-peers", "vxlan: program peers as RemoteSubnetRoute policies, as RemoteEndpoints (one HNS endpoint per remote pod address), or auto (RemoteSubnetRoute where HNS has it)", func(v string) (err error) {
		f.hnsPeers, err = windows.ParsePeerMode(v)
		return err
	})
	fs.StringVar(&f.sourceVIPFile, "source-vip-file", `C:\k\sourceVip.json`, "vxlan: where kube-proxy's start-up reads the overlay's source VIP (microsoft/SDN's scripts: C:\\k\\sourceVip.json); it is also written next to --subnet-file. \"\" writes it there alone")
}

// platform is Windows': HNS's planes (newPlane), and the IP Helper's default route. It has no
// route lookup: weftd on Windows refuses --iface-can-reach, as flanneld does ("ifcanreach is
// not supported on windows").
//
// NetworkPolicy is enforced with ACLs on the endpoints of the plane's network: its policy
// plane is the data plane's, which OpenPlanes opened before Policy is called.
func (f *planeFlags) platform(cfg daemon.Config) daemon.Platform {
	var opened *windows.Plane
	return daemon.Platform{
		OpenPlanes: func(log *slog.Logger) (backend.Plane, backend.Plane, error) {
			p, err := f.newPlane(cfg, log)
			if err != nil {
				return nil, nil, err
			}
			opened = p
			return p, p.IPv6(), nil
		},
		DefaultIf: func() (string, error) { return windows.NewIPHelper().DefaultRouteInterface() },
		Policy:    func(*slog.Logger) daemon.PolicyPlane { return opened.NetworkPolicy() },
	}
}

// newPlane opens HNS (its v2 API) and the host's IP Helper. Next to subnet.env go the files
// the weft CNI plugin reads (package hnsfile); the source VIP also goes where kube-proxy's
// start-up reads it. The IPv6 family's plane shares HNS and the host with the
// IPv4 one (one L2Bridge network carries both; Overlay carries no IPv6).
func (f *planeFlags) newPlane(cfg daemon.Config, log *slog.Logger) (*windows.Plane, error) {
	netFile, vipFile := hnsfile.Paths(cfg.SubnetFile)
	vips := []string{vipFile}
	if f.sourceVIPFile != "" && filepath.Clean(f.sourceVIPFile) != vipFile {
		vips = append(vips, f.sourceVIPFile)
	}
	host := windows.NewIPHelper()
	return windows.New(windows.NewHCN(), host, windows.Config{
		Peers:          f.hnsPeers,
		SourceVIPFiles: vips,
		NetworkFile:    netFile,
		NetworkPolicy:  cfg.NetworkPolicy,
		HostReady:      host.HostReady,
	}, log), nil
}
