package kubecluster

import (
	"bytes"
	"context"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// The images Kubernetes' e2e tests run, named as the e2e framework of tools/kube's release
// names them (test/utils/image/manifest.go: agnhost and busybox under the promoter's
// e2e-test-images registry, pause under registry.k8s.io), and CoreDNS's, named as kubeadm
// of that release deploys it (cmd/kubeadm/app/constants: CoreDNSVersion).
// TestImageNamesFollowKubernetes holds them to those files.
const (
	AgnhostImage  = "registry.k8s.io/e2e-test-images/agnhost:2.63.0"
	BusyBoxImage  = "registry.k8s.io/e2e-test-images/busybox:1.37.0-1"
	E2EPauseImage = "registry.k8s.io/pause:3.10.2"
	CoreDNSImage  = "registry.k8s.io/coredns/coredns:v1.14.2"
)

// pathEnv is the images' PATH: Debian's programs (in /usr) before busybox's applets (in
// /bin), where both have one (nc, ip): the e2e tests pass them the flags of the former.
const pathEnv = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// E2EImages builds the images of the e2e tests into work, and returns their archives, to be
// imported into every node (Cluster.ImportImages) beside BaseImages':
//   - agnhost (AgnhostImage), the program the network tests run in most pods, built from
//     k8s.io/kubernetes at tools/kube's version, with what its image holds besides: the
//     shell and tools the tests exec in its pods (sh, curl, nc, dig, wget, ip, ss from
//     Debian, the rest from busybox), /coredns, porter's certificate, the user and group of the
//     SupplementalGroups test;
//   - busybox (BusyBoxImage), Debian's busybox-static with every applet in /bin;
//   - the pause image again, named E2EPauseImage, as the framework's pods ask for it;
//   - CoreDNS (CoreDNSImage), for DeployCoreDNS.
//
// It installs what it needs (cached after the first time): agnhost with
// tools/kube/install-kube.sh, CoreDNS with tools/coredns/install-coredns.sh, both into
// repo/.cache, and Debian's packages with tools/install-e2e-deps.sh (root).
func E2EImages(ctx context.Context, repo, work string) ([]string, error) {
	kubeBin := filepath.Join(repo, ".cache", "kube", "bin")
	corednsBin := filepath.Join(repo, ".cache", "coredns", "bin")
	for _, argv := range [][]string{
		{filepath.Join(repo, "tools", "install-e2e-deps.sh")},
		{filepath.Join(repo, "tools", "kube", "install-kube.sh"), kubeBin, "agnhost"},
		{filepath.Join(repo, "tools", "coredns", "install-coredns.sh"), corednsBin},
	} {
		if out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("kubecluster: %s: %w: %s", strings.Join(argv, " "), err, strings.TrimSpace(string(out)))
		}
	}
	coredns := filepath.Join(corednsBin, "coredns")

	bb, err := busyboxTree(ctx)
	if err != nil {
		return nil, err
	}
	tools, err := debianTools(ctx)
	if err != nil {
		return nil, err
	}
	agn, err := agnhostTree(ctx, repo, filepath.Join(kubeBin, "agnhost"), coredns)
	if err != nil {
		return nil, err
	}
	dns, err := corednsTree(coredns)
	if err != nil {
		return nil, err
	}
	pause, err := pauseImage(ctx, repo, work)
	if err != nil {
		return nil, err
	}
	images := []struct {
		ref   string
		img   v1.Image
		cfg   v1.Config
		trees []*fsTree
	}{
		// The real image's entrypoint and command: pods that pass only args run that
		// subcommand of agnhost, pods that pass none pause.
		{ref: AgnhostImage, cfg: v1.Config{Entrypoint: []string{"/agnhost"}, Cmd: []string{"pause"}, Env: []string{pathEnv}},
			trees: []*fsTree{bb, tools, agn}},
		{ref: BusyBoxImage, cfg: busyboxConfig(), trees: []*fsTree{bb}},
		// CoreDNS's image runs it as distroless's nonroot user, which binds port 53 by
		// the file capability corednsTree gives it.
		{ref: CoreDNSImage, cfg: v1.Config{Entrypoint: []string{"/coredns"}, User: "65532:65532", Env: []string{pathEnv}},
			trees: []*fsTree{dns}},
		{ref: E2EPauseImage, img: pause},
	}
	var archives []string
	for _, im := range images {
		img := im.img
		if img == nil {
			if img, err = imageOf(im.cfg, im.trees...); err != nil {
				return nil, fmt.Errorf("kubecluster: %s: %w", im.ref, err)
			}
		}
		out := archivePath(work, im.ref)
		if err := writeArchive(out, im.ref, img); err != nil {
			return nil, fmt.Errorf("kubecluster: %w", err)
		}
		archives = append(archives, out)
	}
	return archives, nil
}

// busyboxConfig runs busybox's image as its Dockerfile does: sh, with PATH.
func busyboxConfig() v1.Config {
	return v1.Config{Cmd: []string{"sh"}, Env: []string{pathEnv}}
}

// BusyBoxArchive writes busybox's image (BusyBoxImage, as E2EImages makes it) to an image
// archive in dir, which it returns: the one test image that needs no build, for the tests
// that run busybox alone.
func BusyBoxArchive(ctx context.Context, dir string) (string, error) {
	bb, err := busyboxTree(ctx)
	if err != nil {
		return "", err
	}
	return treeArchive(dir, BusyBoxImage, busyboxConfig(), bb)
}

// busyboxTree is Debian's busybox-static at /bin/busybox, each of its applets a link to it
// in /bin (as the busybox image has them), and the few files a base image has.
func busyboxTree(ctx context.Context) (*fsTree, error) {
	bin, err := exec.LookPath("busybox")
	if err != nil {
		return nil, fmt.Errorf("kubecluster: busybox (Debian's busybox-static; tools/install-e2e-deps.sh): %w", err)
	}
	if dynamic, err := interpreter(bin); err != nil {
		return nil, fmt.Errorf("kubecluster: %w", err)
	} else if dynamic != "" {
		return nil, fmt.Errorf("kubecluster: %s is linked dynamically (%s), not busybox-static's", bin, dynamic)
	}
	out, err := exec.CommandContext(ctx, bin, "--list").Output()
	if err != nil {
		return nil, fmt.Errorf("kubecluster: %s --list: %w", bin, err)
	}
	t := newFSTree()
	if err := t.hostFile("/bin/busybox", bin); err != nil {
		return nil, fmt.Errorf("kubecluster: %w", err)
	}
	applets := strings.Fields(string(out))
	if len(applets) < 100 {
		return nil, fmt.Errorf("kubecluster: %s --list names %d applets, not a full busybox", bin, len(applets))
	}
	for _, a := range applets {
		if a != "busybox" {
			t.symlink("/bin/"+a, "busybox")
		}
	}
	t.file("/etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/home:/bin/false\n"))
	t.file("/etc/group", 0o644, []byte("root:x:0:\nnobody:x:65534:\n"))
	t.dir("/tmp", 0o1777)
	t.dir("/root", 0o700)
	t.dir("/home", 0o755)
	t.dir("/var", 0o755)
	return t, nil
}

// debianTools are the programs the e2e tests exec in agnhost's pods beyond a shell's (its
// image installs them from Alpine): Debian's, at the paths the image gives them, with the
// shared libraries each loads.
func debianTools(ctx context.Context) (*fsTree, error) {
	t := newFSTree()
	for _, p := range []struct{ at, command string }{
		{"/usr/bin/curl", "curl"},
		// OpenBSD's nc, as Alpine's netcat-openbsd: the tests use its -u, -w, -p, -z.
		{"/usr/bin/nc", "nc.openbsd"},
		{"/usr/bin/dig", "dig"},
		// GNU wget before busybox's: the Services tests run `wget -T`, and Debian 12's
		// busybox is built without wget's timeout, whose -T then crashes it (SIGSEGV).
		{"/usr/bin/wget", "wget"},
		{"/usr/sbin/ip", "ip"},
		{"/usr/bin/ss", "ss"},
		{"/bin/bash", "bash"},
		{"/bin/dash", "dash"},
		// The DNS specs check /etc/hosts entries with getent (Alpine's musl-utils in the
		// real image; busybox has none).
		{"/usr/bin/getent", "getent"},
	} {
		src, err := exec.LookPath(p.command)
		if err != nil {
			return nil, fmt.Errorf("kubecluster: %s for agnhost's image (tools/install-e2e-deps.sh): %w", p.command, err)
		}
		if err := t.hostProgram(ctx, p.at, src); err != nil {
			return nil, fmt.Errorf("kubecluster: %w", err)
		}
	}
	// The tests exec their commands with /bin/sh -c. Debian's busybox sh runs its own
	// applets before PATH's programs (busybox's "standalone shell"), so that its ip and nc
	// would answer for iproute2's and OpenBSD's; Alpine's sh, the real image's, does not.
	t.symlink("/bin/sh", "dash")
	// glibc's default without the file asks DNS before /etc/hosts; musl, which the real
	// image has, reads /etc/hosts first.
	t.file("/etc/nsswitch.conf", 0o644, []byte("hosts: files dns\n"))
	return t, nil
}

// hostProgram adds the program src of this machine at p, with every shared library ldd
// says it loads, each at the path the loader found it (so that the image's loader, which
// searches the same directories, finds it there too).
func (t *fsTree) hostProgram(ctx context.Context, p, src string) error {
	if err := t.hostFile(p, src); err != nil {
		return err
	}
	interp, err := interpreter(src)
	if err != nil || interp == "" {
		return err
	}
	return t.libraries(ctx, src)
}

// libraries adds the shared libraries ldd says the program or library src loads, as
// hostProgram does.
func (t *fsTree) libraries(ctx context.Context, src string) error {
	out, err := exec.CommandContext(ctx, "ldd", src).Output()
	if err != nil {
		return fmt.Errorf("ldd %s: %w", src, err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		var lib string
		switch {
		case len(f) >= 3 && f[1] == "=>" && f[2] == "not":
			return fmt.Errorf("%s: library %s not found", src, f[0])
		case len(f) >= 3 && f[1] == "=>" && strings.HasPrefix(f[2], "/"):
			lib = f[2]
		case len(f) >= 1 && strings.HasPrefix(f[0], "/"):
			lib = f[0] // the loader itself
		default:
			continue // linux-vdso.so.1: the kernel's, in every process
		}
		if err := t.hostFile(lib, lib); err != nil {
			return err
		}
	}
	return nil
}

// interpreter is the ELF program's loader (PT_INTERP), "" if it is static.
func interpreter(path string) (string, error) {
	f, err := elf.Open(path)
	if err != nil {
		return "", fmt.Errorf("reading %s: %w", path, err)
	}
	defer f.Close()
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			data := make([]byte, prog.Filesz)
			if _, err := prog.ReadAt(data, 0); err != nil {
				return "", fmt.Errorf("reading the interpreter of %s: %w", path, err)
			}
			return string(bytes.TrimRight(data, "\x00")), nil
		}
	}
	return "", nil
}

// agnhostTree is what agnhost's Dockerfile (test/images/agnhost of k8s.io/kubernetes) adds
// to its base image, less what no test here runs (iperf, the fake registry's content).
func agnhostTree(ctx context.Context, repo, agnhost, coredns string) (*fsTree, error) {
	t := newFSTree()
	if err := t.hostFile("/agnhost", agnhost); err != nil {
		return nil, fmt.Errorf("kubecluster: %w", err)
	}
	// The entrypoint-tester tests run the image with the entrypoint agnhost-2.
	t.symlink("/agnhost-2", "agnhost")
	// The DNS test of configurable nameservers runs /coredns in an agnhost pod.
	if err := t.hostFile("/coredns", coredns); err != nil {
		return nil, fmt.Errorf("kubecluster: %w", err)
	}
	t.dir("/uploads", 0o755) // netexec's /upload
	src, err := kubernetesSource(ctx, repo)
	if err != nil {
		return nil, err
	}
	if src == "" {
		return nil, errors.New("kubecluster: k8s.io/kubernetes is not downloaded (tools/kube/install-kube.sh does it)")
	}
	// porter serves TLS with these, from the image's working directory.
	for _, f := range []string{"localhost.crt", "localhost.key"} {
		if err := t.hostFile("/"+f, filepath.Join(src, "test", "images", "agnhost", "porter", f)); err != nil {
			return nil, fmt.Errorf("kubecluster: %w", err)
		}
	}
	// The SupplementalGroups test expects a user and a group defined in the image:
	// user-defined-in-image (1000) in group-defined-in-image (50000).
	t.file("/etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/home:/bin/false\n"+
		"user-defined-in-image:x:1000:1000::/home/user-defined-in-image:/bin/sh\n"))
	t.file("/etc/group", 0o644, []byte("root:x:0:\nnobody:x:65534:\nuser-defined-in-image:x:1000:\n"+
		"group-defined-in-image:x:50000:user-defined-in-image\n"))
	t.dir("/home/user-defined-in-image", 0o755)
	return t, nil
}

// kubernetesSource is the directory of the k8s.io/kubernetes module tools/kube pins, ""
// if it is not downloaded.
func kubernetesSource(ctx context.Context, repo string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", "list", "-mod=readonly", "-m", "-f", "{{.Dir}}", "k8s.io/kubernetes")
	cmd.Dir = filepath.Join(repo, "tools", "kube")
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("kubecluster: finding k8s.io/kubernetes's source: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// corednsTree is CoreDNS's image: /coredns with the file capability CAP_NET_BIND_SERVICE
// (as its Dockerfile's setcap gives it), so that the nonroot user binds port 53: kubeadm's
// Deployment drops every capability but that one, and forbids privilege escalation, which
// lets a file capability through only when the process already holds it.
func corednsTree(coredns string) (*fsTree, error) {
	t := newFSTree()
	if err := t.hostFile("/coredns", coredns); err != nil {
		return nil, fmt.Errorf("kubecluster: %w", err)
	}
	if err := t.xattr("/coredns", "security.capability", netBindServiceCapability()); err != nil {
		return nil, fmt.Errorf("kubecluster: %w", err)
	}
	t.file("/etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"))
	t.file("/etc/group", 0o644, []byte("root:x:0:\nnonroot:x:65532:\n"))
	t.dir("/tmp", 0o1777)
	return t, nil
}

// netBindServiceCapability is the security.capability attribute (struct vfs_cap_data,
// revision 2, little-endian) that gives a program CAP_NET_BIND_SERVICE (10 in
// linux/capability.h), permitted and effective, as `setcap cap_net_bind_service=+ep`
// writes it.
func netBindServiceCapability() []byte {
	const (
		revision2         = 0x02000000
		effective         = 0x000001
		capNetBindService = 10
	)
	var b [20]byte
	binary.LittleEndian.PutUint32(b[0:], revision2|effective)
	binary.LittleEndian.PutUint32(b[4:], 1<<capNetBindService) // permitted, of capabilities 0 to 31
	return b[:]
}
