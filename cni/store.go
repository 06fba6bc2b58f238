package cni

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/weftnet/weft/internal/atomicfile"
)

// The stored delegate configuration is the delegate's JSON alone, in dataDir/<id>, as
// flannel's plugin keeps it: so either plugin can delete the other's pods.
const (
	storeDirMode  = 0o700
	storeFileMode = 0o600
)

// pauseNetns is the CNI_NETNS dockershim passes for a pod's sandbox on Windows.
const pauseNetns = "none"

// storeID is the name a container's delegate configuration is kept under: its container ID
// or, on Windows, the sandbox's ID when the runtime names the namespace "<kind>:<sandbox>"
// (dockershim), as flannel does, so that every container of a pod finds the sandbox's.
func storeID(goos OS, containerID, netns string) (string, error) {
	id := containerID
	if goos == Windows && netns != "" && netns != pauseNetns {
		if _, sandbox, ok := strings.Cut(netns, ":"); ok {
			id = sandbox
		}
	}
	// The ID becomes a file name: it must not reach out of dataDir.
	if id == "" || id == "." || id == ".." || strings.ContainsAny(id, `/\:`) || strings.ContainsRune(id, 0) {
		return "", &Error{Code: types.ErrInvalidEnvironmentVariables,
			Msg: fmt.Sprintf("container ID %q (netns %q): not usable as a file name", containerID, netns)}
	}
	return id, nil
}

// saveDelegate keeps conf for the container atomically: a DEL or CHECK racing a crashed ADD
// finds the whole configuration or none.
func saveDelegate(dataDir, id string, conf []byte) error {
	if err := os.MkdirAll(dataDir, storeDirMode); err != nil {
		return &Error{Code: types.ErrIOFailure, Msg: "creating the delegate config directory " + dataDir, Err: err}
	}
	if err := atomicfile.Write(filepath.Join(dataDir, id), conf, storeFileMode); err != nil {
		return &Error{Code: types.ErrIOFailure, Msg: "keeping the delegate config of container " + id, Err: err}
	}
	return nil
}

// loadDelegate reads the container's delegate configuration; an error satisfying
// errors.Is(err, fs.ErrNotExist) if there is none.
func loadDelegate(dataDir, id string) ([]byte, error) {
	path := filepath.Join(dataDir, id)
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, &Error{Code: types.ErrIOFailure, Msg: "reading the delegate config of container " + id, Err: err}
	}
	return data, nil
}

// removeDelegate forgets the container's delegate configuration; one that is gone already
// is no error.
func removeDelegate(dataDir, id string) error {
	err := os.Remove(filepath.Join(dataDir, id))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return &Error{Code: types.ErrIOFailure, Msg: "removing the delegate config of container " + id, Err: err}
	}
	return nil
}

// storedDelegate is what weft reads back from a stored delegate configuration.
type storedDelegate struct {
	Type    string
	Subnets []netip.Prefix // the node subnets its IPAM hands out addresses from, masked
}

// parseStored reads a stored delegate configuration, written by weft or by flannel: the
// type, and the subnets of an ipam "subnet" (flannel on Windows) or "ranges" (flannel on
// Linux, weft with reserved addresses).
func parseStored(data []byte) (storedDelegate, error) {
	var conf struct {
		Type string `json:"type"`
		IPAM struct {
			Subnet string `json:"subnet"`
			Ranges [][]struct {
				Subnet string `json:"subnet"`
			} `json:"ranges"`
		} `json:"ipam"`
	}
	if err := json.Unmarshal(data, &conf); err != nil {
		return storedDelegate{}, fmt.Errorf("parsing stored delegate config: %w", err)
	}
	if conf.Type == "" {
		return storedDelegate{}, errors.New("parsing stored delegate config: no type")
	}
	s := storedDelegate{Type: conf.Type}
	add := func(v string) error {
		if v == "" {
			return nil
		}
		p, err := netip.ParsePrefix(v)
		if err != nil {
			return fmt.Errorf("parsing stored delegate config: ipam subnet: %w", err)
		}
		if p = p.Masked(); !slices.Contains(s.Subnets, p) {
			s.Subnets = append(s.Subnets, p)
		}
		return nil
	}
	if err := add(conf.IPAM.Subnet); err != nil {
		return storedDelegate{}, err
	}
	for _, set := range conf.IPAM.Ranges {
		for _, r := range set {
			if err := add(r.Subnet); err != nil {
				return storedDelegate{}, err
			}
		}
	}
	return s, nil
}
