package cluster

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// What hack/cluster.sh exec sets for the command it runs, and nothing else: the
// kubeconfig, the cluster's binaries on PATH, and these caches in the state directory.
var (
	execCaches = []string{"KUBECACHEDIR", "HELM_CACHE_HOME", "HELM_CONFIG_HOME", "HELM_DATA_HOME"}
	execSets   = append([]string{"KUBECONFIG", "PATH"}, execCaches...)
)

// What the shell itself keeps up to date for any child (bash's own bookkeeping), which
// is not the script's doing.
var shellSets = []string{"SHLVL", "_", "PWD", "OLDPWD"}

// envMap parses `env -0`.
func envMap(out string) map[string]string {
	m := map[string]string{}
	for _, kv := range strings.Split(out, "\x00") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			m[k] = v
		}
	}
	return m
}

// callerEnvironment is the suite's own, less what exec sets (which the spec checks it
// sets) and less GOWORK (which the script used to export, GOWORK=off, for its own builds),
// with one variable of the caller's own that no script knows.
func callerEnvironment() map[string]string {
	m := map[string]string{}
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	for _, k := range execSets {
		if k != "PATH" {
			delete(m, k)
		}
	}
	delete(m, "GOWORK")
	m["FUSEBOX_E2E_CALLER"] = "a value with spaces, an = and 'quotes'"
	if *clusterState != "" {
		m["FUSEBOX_CLUSTER_DIR"] = *clusterState
	}
	return m
}

func environ(m map[string]string) []string {
	var out []string
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	return out
}

// execAs runs hack/cluster.sh exec ARGS with exactly the environment env, in dir.
func execAs(ctx context.Context, env map[string]string, dir string, args ...string) string {
	GinkgoHelper()
	cmd := clusterScript(ctx, append([]string{"exec"}, args...)...)
	cmd.Env, cmd.Dir = environ(env), dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	Expect(cmd.Run()).To(Succeed(), "hack/cluster.sh exec %s: %s", strings.Join(args, " "), stderr.String())
	return stdout.String()
}

var _ = Describe("hack/cluster.sh exec", Label("cluster"), func() {
	It("runs the command with the caller's environment, adding only the cluster's kubeconfig, binaries and caches", func(ctx SpecContext) {
		connect()
		caller := callerEnvironment()
		// On the first node by default, and on each node by name: the same environment.
		targets := [][]string{{"--"}}
		for _, n := range nodeNames(ctx) {
			targets = append(targets, []string{"--node", n, "--"})
		}
		for _, target := range targets {
			got := envMap(execAs(ctx, caller, *repoRoot, append(target, "env", "-0")...))
			for k, want := range caller {
				if k == "PATH" || slices.Contains(shellSets, k) {
					continue
				}
				Expect(got).To(HaveKeyWithValue(k, want), "exec %v changed or dropped the caller's %s", target, k)
			}
			for k := range got {
				if _, mine := caller[k]; !mine && !slices.Contains(execSets, k) && !slices.Contains(shellSets, k) {
					Fail("exec " + strings.Join(target, " ") + " added " + k + "=" + got[k] + " to the caller's environment")
				}
			}
			// The cluster's binaries first, then the caller's PATH as it was.
			bin, rest, _ := strings.Cut(got["PATH"], ":")
			Expect(rest).To(Equal(caller["PATH"]))
			Expect(filepath.Join(bin, "kubectl")).To(BeAnExistingFile())
			Expect(got["KUBECONFIG"]).To(BeAnExistingFile())
			if *clusterState != "" {
				for _, k := range execCaches {
					Expect(got[k]).To(HavePrefix(*clusterState+"/"), "%s is the state directory's", k)
				}
			}
		}

		// What the caller's own build would see: the repository's workspace, as outside
		// exec (`exec -- make deploy` failed with a missing go.sum entry under GOWORK=off).
		workspace := filepath.Join(*repoRoot, "go.work")
		if _, err := os.Stat(workspace); err != nil {
			unavailable("no %s to find: -root is not the repository's root", workspace)
		}
		abs, err := filepath.Abs(workspace)
		Expect(err).NotTo(HaveOccurred())
		Expect(strings.TrimSpace(execAs(ctx, caller, *repoRoot, "--", "go", "env", "GOWORK"))).To(Equal(abs))
	}, SpecTimeout(2*time.Minute))
})
