package linux

import (
	"context"
	"fmt"

	"github.com/weftnet/weft/backend"
)

var _ backend.TxChecksumOffloader = (*Plane)(nil)

// txChecksumFeatures are the kernel's names (ETHTOOL_GSTRINGS of ETH_SS_FEATURES) of the
// transmit checksum offloads: what ethtool's "tx" switches (`ethtool -K dev tx off`). A VXLAN
// device can change only tx-checksum-ip-generic (NETIF_F_HW_CSUM); the others are listed so
// that a device offering them is switched whole. Turning them off makes the kernel drop the
// segmentation offloads that need them as well, as it does for ethtool.
func txChecksumFeatures() []string {
	return []string{"tx-checksum-ipv4", "tx-checksum-ip-generic", "tx-checksum-ipv6", "tx-checksum-fcoe-crc", "tx-checksum-sctp"}
}

// TxChecksumOffload reports whether dev offloads any transmit checksum, read through the
// SIOCETHTOOL ioctl (ETHTOOL_GFEATURES).
func (p *Plane) TxChecksumOffload(dev string) (bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	on, _, err := p.txChecksum(dev)
	return on, err
}

// SetTxChecksumOffload switches dev's transmit checksum offloads (ETHTOOL_SFEATURES) and
// reads them back: the kernel may refuse a change without saying so.
func (p *Plane) SetTxChecksumOffload(ctx context.Context, dev string, on bool) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	was, changeable, err := p.txChecksum(dev)
	if err != nil {
		return err
	}
	if len(changeable) == 0 {
		return fmt.Errorf("switching transmit checksum offload of %s: the device offers none to change", dev)
	}
	if was == on {
		return nil
	}
	want := make(map[string]bool, len(changeable))
	for _, name := range changeable {
		want[name] = on
	}
	if err := p.ethtool.Change(dev, want); err != nil {
		return fmt.Errorf("switching transmit checksum offload of %s %s: %w", dev, onOff(on), err)
	}
	now, _, err := p.txChecksum(dev)
	if err != nil {
		return err
	}
	if now != on {
		return fmt.Errorf("switching transmit checksum offload of %s %s: the kernel kept it %s", dev, onOff(on), onOff(now))
	}
	return nil
}

// txChecksum reads whether dev offloads any transmit checksum, and which of the offloads it
// lets change. The caller holds p.mu.
func (p *Plane) txChecksum(dev string) (on bool, changeable []string, err error) {
	fs, err := p.ethtool.FeaturesWithState(dev)
	if err != nil {
		return false, nil, fmt.Errorf("reading the features of %s: %w", dev, err)
	}
	for _, name := range txChecksumFeatures() {
		f, ok := fs[name]
		if !ok {
			continue
		}
		on = on || f.Active
		if f.Available {
			changeable = append(changeable, name)
		}
	}
	return on, changeable, nil
}

func onOff(on bool) string {
	if on {
		return "on"
	}
	return "off"
}
