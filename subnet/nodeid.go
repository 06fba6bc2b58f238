package subnet

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/weftnet/weft/internal/atomicfile"
)

// NodeIDFile is the file beside subnet.env (subnetFile) that keeps the node's identity: it
// lives as long as subnet.env does, across restarts of weftd and of its pod, and like it is
// gone after a reboot (/run). A VM cloned from a running node's disk image boots without it,
// and makes an identity of its own.
func NodeIDFile(subnetFile string) string {
	return filepath.Join(filepath.Dir(subnetFile), "weft-node-id")
}

// LoadNodeID returns the node identity kept in path, or makes one (128 random bits, in hex),
// keeps it there and reports made. A file that holds no identity is replaced.
func LoadNodeID(path string) (id string, made bool, err error) {
	b, err := os.ReadFile(path)
	if err == nil {
		if id := strings.TrimSpace(string(b)); validNodeID(id) {
			return id, false, nil
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", false, fmt.Errorf("read node identity %s: %w", path, err)
	}
	var raw [16]byte
	_, _ = rand.Read(raw[:]) // never fails (crypto/rand)
	id = hex.EncodeToString(raw[:])
	if err := atomicfile.Write(path, []byte(id+"\n"), 0o644); err != nil {
		return "", false, fmt.Errorf("keep node identity: %w", err)
	}
	return id, true, nil
}

func validNodeID(id string) bool {
	_, err := hex.DecodeString(id)
	return err == nil && len(id) == 32
}
