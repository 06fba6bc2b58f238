// Package wgkey keeps the node's WireGuard private key in a file, where flanneld keeps it
// (/run/flannel/wgkey, or the file WIREGUARD_KEY_FILE names) and as it writes it (the key in
// base64, nothing else), so that a node moving between flanneld and weftd keeps its key and
// its peers need no new configuration. One key serves both families' devices.
package wgkey

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/weftnet/weft/backend"
	"github.com/weftnet/weft/internal/atomicfile"
)

// DefaultPath is flanneld's key file.
const DefaultPath = "/run/flannel/wgkey"

// Path is the key file: WIREGUARD_KEY_FILE's value when set (as flanneld reads it), else
// DefaultPath.
func Path(lookupEnv func(string) (string, bool)) string {
	if p, ok := lookupEnv("WIREGUARD_KEY_FILE"); ok {
		return p
	}
	return DefaultPath
}

// Load reads the private key in path; when there is no such file it makes a key and writes
// it there, readable by root alone. created says which.
func Load(path string) (key backend.Key, created bool, err error) {
	k, err := Read(path)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return k, false, err
	}
	k, err = Generate()
	if err != nil {
		return backend.Key{}, false, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return backend.Key{}, false, fmt.Errorf("making the directory of WireGuard key file %s: %w", path, err)
	}
	if err := atomicfile.Write(path, []byte(k.String()), 0o400); err != nil {
		return backend.Key{}, false, fmt.Errorf("writing WireGuard key file %s: %w", path, err)
	}
	return k, true, nil
}

// Read reads the private key in path, and makes none: an error wrapping fs.ErrNotExist when
// there is no such file.
func Read(path string) (backend.Key, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return backend.Key{}, fmt.Errorf("reading WireGuard key file: %w", err)
	}
	k, err := backend.ParseKey(strings.TrimSpace(string(b)))
	if err != nil {
		// The file's content is a secret: the error does not show it.
		return backend.Key{}, fmt.Errorf("WireGuard key file %s holds no key (32 bytes in base64)", path)
	}
	return k, nil
}

// Generate makes a private key, clamped as Curve25519 wants it (as wg genkey does).
func Generate() (backend.Key, error) {
	var k backend.Key
	if _, err := rand.Read(k[:]); err != nil {
		return k, fmt.Errorf("making a WireGuard key: %w", err)
	}
	k[0] &= 248
	k[31] = k[31]&127 | 64
	return k, nil
}
