package daemon

import (
	"context"
	"github.com/weftnet/weft/netif"
	"log/slog"
	"net/netip"
	"path/filepath"

	"github.com/weftnet/weft/backend"
	"github.com/weftnet/weft/subnet"
	"github.com/weftnet/weft/windows"
)

// windowsPlane is the HNS data plane. HNS makes an Overlay network only for a known
// subnet, so instead of EnsureVXLAN before the lease it prepares the lease: the network is
// made for the subnet the acquisition picks, and its DR MAC published with it.
type windowsPlane struct {
	*windows.Plane
	host *windows.IPHelper
}

func newPlane(log *slog.Logger) (Plane, error) {
	hns, err := windows.NewHCN()
	if err != nil {
		return nil, err
	}
	host := windows.NewIPHelper()
	return &windowsPlane{Plane: windows.New(hns, host, windows.Config{HostReady: host.HostReady}, log), host: host}, nil
}

// prepare implements leasePreparer: dev is nil for host-gw.
func (p *windowsPlane) prepare(cfg Config, net *subnet.Config, ext netif.External, dev *backend.VXLANDevice, attrs subnet.LeaseAttrs) func(context.Context, netip.Prefix, netip.Prefix) (subnet.LeaseAttrs, error) {
	wc := windows.ConfigFrom(net.Backend)
	wc.Peers = cfg.HNSPeers
	wc.HostReady = p.host.HostReady
	if dev != nil {
		// kube-proxy's start-up reads its source VIP here, next to subnet.env.
		wc.SourceVIPFile = filepath.Join(filepath.Dir(cfg.SubnetFile), "sourceVip.json")
	}
	p.Configure(wc)
	if dev != nil {
		return p.PrepareVXLAN(*dev, attrs)
	}
	return p.PrepareHostGW(ext.Name, attrs)
}

func defaultRouteInterface() (string, error) { return windows.NewIPHelper().DefaultRouteInterface() }
