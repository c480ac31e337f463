package cluster

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// hostState is what a cluster could leave behind on the host: `make test-cluster` takes
// one before `hack/cluster.sh up` (-host-snapshot) and the spec labelled host compares the
// host with it after `hack/cluster.sh down`. The machine is shared, so the comparison looks
// only where a node's parts write (mounts, iptables, sysctls, the directories a kubelet,
// containerd, CNI or kubectl use, cgroups, network links) and at processes that are the
// cluster's by their binary or namespace, not at every process or at /tmp.
type hostState struct {
	Mounts   []string          `json:"mounts"`
	Iptables []string          `json:"iptables"`
	Sysctls  map[string]string `json:"sysctls"`
	Files    []string          `json:"files"`
	Cgroups  []string          `json:"cgroups"`
	Links    []string          `json:"links"`
	Modules  []string          `json:"modules"`
}

func writeHostSnapshot(path string) error {
	s, err := snapshotHost()
	if err != nil {
		return err
	}
	b, err := json.MarshalIndent(s, "", " ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

func snapshotHost() (*hostState, error) {
	s := &hostState{Sysctls: map[string]string{}}
	mountinfo, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	for _, line := range strings.Split(strings.TrimSpace(string(mountinfo)), "\n") {
		// mount ID, parent ID, major:minor, root, mount point, options, ... - type source
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		typ := ""
		if i := slices.Index(f, "-"); i > 0 && i+2 < len(f) {
			typ = f[i+1] + " " + f[i+2]
		}
		s.Mounts = append(s.Mounts, f[4]+" "+typ)
	}
	for _, save := range []string{"iptables-save", "ip6tables-save"} {
		out, err := exec.Command(save).Output()
		if err != nil {
			return nil, fmt.Errorf("%s: %w (apt-get install iptables)", save, err)
		}
		for _, line := range strings.Split(string(out), "\n") {
			if line == "" || strings.HasPrefix(line, "#") || line == "COMMIT" {
				continue
			}
			s.Iptables = append(s.Iptables, save+": "+counters.ReplaceAllString(line, ""))
		}
	}
	_ = filepath.WalkDir("/proc/sys", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || volatileSysctl.MatchString(path) {
			return nil
		}
		if b, err := os.ReadFile(path); err == nil {
			s.Sysctls[strings.TrimPrefix(path, "/proc/sys/")] = strings.TrimSpace(string(b))
		}
		return nil
	})
	for _, dir := range watchedDirs {
		s.Files = append(s.Files, listDir(dir.path, dir.depth)...)
	}
	s.Cgroups = listDir("/sys/fs/cgroup", 3)
	s.Links = listDir("/sys/class/net", 1)
	if mods, err := os.ReadFile("/proc/modules"); err == nil {
		for _, line := range strings.Split(strings.TrimSpace(string(mods)), "\n") {
			s.Modules = append(s.Modules, strings.Fields(line)[0])
		}
	}
	return s, nil
}

// The cgroups a node's parts make: the kubelets' parent (hack/cluster/env.sh's
// fusebox-cluster-<hash>, with every node's inside it), and the names a kubelet or
// containerd uses when nothing tells it otherwise.
var nodeCgroup = regexp.MustCompile(`/(fusebox-cluster-[0-9a-f]+|kubepods[^/]*|k8s\.io|containerd|kubelet[^/]*)(/|$)`)

// iptables-save's packet and byte counters, which change on their own.
var counters = regexp.MustCompile(`\[\d+:\d+\]`)

// Sysctls whose values move by themselves: counters and the kernel's own tuning.
var volatileSysctl = regexp.MustCompile(`^/proc/sys/(fs/(dentry-state|file-nr|inode-nr|inode-state|aio-nr|quota/|binfmt_misc/)|kernel/(random/|ns_last_pid|pty/nr|perf_event_max_sample_rate|tainted)|net/netfilter/nf_conntrack_count)`)

// Where a node's parts write when nobody stops them, and how deep to look.
var watchedDirs = []struct {
	path  string
	depth int
}{
	{"/etc", 1}, {"/etc/cni", 3}, {"/etc/kubernetes", 3}, {"/etc/containerd", 3},
	{"/var/lib", 1}, {"/var/lib/kubelet", 3}, {"/var/lib/cni", 3}, {"/var/lib/containerd", 2}, {"/var/lib/etcd", 2},
	{"/var/log", 1}, {"/var/log/pods", 2}, {"/var/log/containers", 2},
	{"/run", 2}, {"/var/run/netns", 1}, {"/opt", 1}, {"/opt/cni", 3},
	{"/root", 1}, {"/root/.config", 1}, {"/dev/shm", 1},
	// kubectl's cache: a directory per API server it talked to. Other engineers' envtest
	// servers (127.0.0.1 and a port) come and go there; the node's address is this
	// cluster's (hack/cluster/env.sh).
	{"/root/.kube", 2}, {"/root/.kube/cache/discovery/198.51.100.10_6443", 0},
}

// listDir lists the paths under dir down to depth levels (dir itself when it exists).
func listDir(dir string, depth int) []string {
	var out []string
	base := strings.Count(dir, "/")
	_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		out = append(out, path)
		if d.IsDir() && strings.Count(path, "/")-base >= depth {
			return filepath.SkipDir
		}
		return nil
	})
	return out
}

// added is what after has and before lacks.
func added(before, after []string) []string {
	have := map[string]bool{}
	for _, b := range before {
		have[b] = true
	}
	var out []string
	for _, a := range after {
		if !have[a] {
			out = append(out, a)
		}
	}
	return out
}

// leftovers compares the host now with the snapshot taken before the cluster started.
func leftovers(before, after *hostState, stateDir string) []string {
	var out []string
	outside := func(paths []string) []string {
		var keep []string
		for _, p := range paths {
			if stateDir == "" || !strings.HasPrefix(p, stateDir) {
				keep = append(keep, p)
			}
		}
		return keep
	}
	for _, m := range outside(added(before.Mounts, after.Mounts)) {
		out = append(out, "mount: "+m)
	}
	for _, r := range added(before.Iptables, after.Iptables) {
		out = append(out, "iptables rule: "+r)
	}
	for k, was := range before.Sysctls {
		if now, ok := after.Sysctls[k]; ok && now != was {
			out = append(out, fmt.Sprintf("sysctl %s: %q, was %q", k, now, was))
		}
	}
	for _, f := range outside(added(before.Files, after.Files)) {
		if owner := debianPackage(f); owner != "" {
			// Someone installed a package meanwhile (the machine is shared): apt's, not
			// the cluster's.
			fmt.Fprintf(GinkgoWriter, "new since the snapshot, from the package %s: %s\n", owner, f)
			continue
		}
		out = append(out, "file: "+f)
	}
	for _, c := range added(before.Cgroups, after.Cgroups) {
		if !nodeCgroup.MatchString(c) {
			// The machine is shared: whoever else runs here makes cgroups of their own
			// while the suite runs.
			fmt.Fprintf(GinkgoWriter, "new since the snapshot, not a node's: %s\n", c)
			continue
		}
		out = append(out, "cgroup: "+c)
	}
	for _, l := range added(before.Links, after.Links) {
		out = append(out, "network link: "+l)
	}
	return out
}

// debianPackage names the installed package that owns path, or "".
func debianPackage(path string) string {
	out, err := exec.Command("dpkg-query", "-S", path).Output()
	if err != nil {
		return ""
	}
	owner, _, _ := strings.Cut(string(out), ":")
	return owner
}

// clusterProcesses are the live processes that are the cluster's: in one of namespaces
// (every node's, and the network namespace the suite ran in: "net:[4026532...]" and the
// like, as readlink names them), started with the cluster's state directory on their
// command line, or in the kubelets' cgroups. Other processes of this shared machine,
// envtest's etcd and kube-apiserver among them, are not.
func clusterProcesses(namespaces []string, stateDir string) []string {
	entries, _ := os.ReadDir("/proc")
	var out []string
	for _, e := range entries {
		if strings.Trim(e.Name(), "0123456789") != "" || e.Name() == strconv.Itoa(os.Getpid()) {
			continue
		}
		dir := filepath.Join("/proc", e.Name())
		in := ""
		for _, kind := range []string{"pid", "net", "mnt"} {
			if ns, _ := os.Readlink(filepath.Join(dir, "ns", kind)); ns != "" && slices.Contains(namespaces, ns) {
				in = ns
				break
			}
		}
		cmdline, _ := os.ReadFile(filepath.Join(dir, "cmdline"))
		cgroups, _ := os.ReadFile(filepath.Join(dir, "cgroup"))
		cmd := strings.TrimSpace(strings.ReplaceAll(string(cmdline), "\x00", " "))
		if in != "" || (stateDir != "" && strings.Contains(cmd, stateDir+"/")) ||
			strings.Contains(string(cgroups), "/kubepods") {
			out = append(out, fmt.Sprintf("process %s (%s): %s", e.Name(), in, cmd))
		}
	}
	return out
}

// nodeNamespaces are the namespaces of every node of the last run, as hack/cluster.sh up
// notes them in the state directory (three per node: pid, net, mnt).
func nodeNamespaces(stateDir string) []string {
	if stateDir == "" {
		return nil
	}
	b, err := os.ReadFile(filepath.Join(stateDir, "namespaces"))
	if err != nil {
		return nil
	}
	// This machine's own namespaces are never the cluster's, whatever a broken run noted.
	var out []string
	for _, ns := range strings.Fields(string(b)) {
		if !slices.Contains(ownNamespaces(), ns) {
			out = append(out, ns)
		}
	}
	return out
}

func ownNamespaces() []string {
	var out []string
	for _, kind := range []string{"pid", "net", "mnt"} {
		if ns, err := os.Readlink("/proc/self/ns/" + kind); err == nil {
			out = append(out, ns)
		}
	}
	return out
}

// netnsFile is where the run inside the cluster notes its network namespace, beside the
// host snapshot.
func netnsFile() string { return *hostBaseline + ".netns" }

// noteNetworkNamespace is called inside the cluster's network namespace.
func noteNetworkNamespace() {
	if *hostBaseline == "" {
		return
	}
	ns, err := os.Readlink("/proc/self/ns/net")
	Expect(err).NotTo(HaveOccurred())
	Expect(os.WriteFile(netnsFile(), []byte(ns), 0o644)).To(Succeed())
}

var _ = Describe("The host after `hack/cluster.sh down`", Label("host"), func() {
	It("has no new mount, process, iptables rule, sysctl change, cgroup, link or file outside the cluster's state directory", func() {
		if *hostBaseline == "" {
			unavailable("no host snapshot from before `hack/cluster.sh up` (-host-baseline): make test-cluster takes one")
		}
		b, err := os.ReadFile(*hostBaseline)
		Expect(err).NotTo(HaveOccurred())
		var before hostState
		Expect(json.Unmarshal(b, &before)).To(Succeed())
		after, err := snapshotHost()
		Expect(err).NotTo(HaveOccurred())
		if mods := added(before.Modules, after.Modules); len(mods) > 0 {
			// Loaded on demand by the kernel (bridge, veth, overlay, netfilter), for the
			// namespace's use; unloading them could break whoever else uses them since.
			fmt.Fprintf(GinkgoWriter, "kernel modules loaded since the snapshot (left loaded): %s\n", strings.Join(mods, " "))
		}
		left := leftovers(&before, after, *clusterState)
		netns, _ := os.ReadFile(netnsFile())
		if self, _ := os.Readlink("/proc/self/ns/net"); self == string(netns) {
			Fail("this spec runs in the cluster's network namespace: run it on the host, after `hack/cluster.sh down`")
		}
		namespaces := nodeNamespaces(*clusterState)
		if *nodeCount > 0 {
			Expect(namespaces).To(HaveLen(3*(*nodeCount)), "the namespaces of %d node(s) in %s/namespaces: the processes of each are looked for", *nodeCount, *clusterState)
		}
		if len(netns) > 0 {
			namespaces = append(namespaces, string(netns))
		}
		left = append(left, clusterProcesses(namespaces, *clusterState)...)
		Expect(left).To(BeEmpty(), "left on the host after `hack/cluster.sh down`")
	})
})
