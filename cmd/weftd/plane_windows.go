package main

import (
	"flag"
	"log/slog"
	"path/filepath"

	"github.com/weftnet/weft/backend"
	"github.com/weftnet/weft/windows"
)

// planeFlags are the data plane's own flags on this OS.
type planeFlags struct {
	hnsPeers windows.PeerMode
}

func (f *planeFlags) addFlags(fs *flag.FlagSet) {
	fs.Func("hns-peers", "vxlan: program peers as RemoteSubnetRoute policies, as RemoteEndpoints (one HNS endpoint per remote pod address), or auto (RemoteSubnetRoute where HNS has it)", func(v string) (err error) {
		f.hnsPeers, err = windows.ParsePeerMode(v)
		return err
	})
}

// newPlane opens HNS (its v2 API) and the host's IP Helper. kube-proxy's start-up reads the
// overlay's source VIP from sourceVip.json, next to subnet.env.
func (f *planeFlags) newPlane(subnetFile string, log *slog.Logger) (backend.Plane, error) {
	hns, err := windows.NewHCN()
	if err != nil {
		return nil, err
	}
	host := windows.NewIPHelper()
	return windows.New(hns, host, windows.Config{
		Peers:         f.hnsPeers,
		SourceVIPFile: filepath.Join(filepath.Dir(subnetFile), "sourceVip.json"),
		HostReady:     host.HostReady,
	}, log), nil
}

func defaultRouteInterface() (string, error) { return windows.NewIPHelper().DefaultRouteInterface() }
