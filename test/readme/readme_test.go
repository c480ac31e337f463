// Package readme checks that what the README says about the API matches what the API
// server does: every YAML example it shows is applied to a real API server, with the
// operator's webhooks and admission policies installed as config/default installs them,
// and its stated outcome (the first line of the block) is what happens. It also checks
// that every link of the README leads to a file of the repository and, with an anchor,
// to one of that file's headings.
package readme

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/yaml"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/internal/testenv"
	"github.com/fusebox-dev/fusebox/internal/testutil"
	"github.com/fusebox-dev/fusebox/pkg/webhook"
)

const repoRoot = "../.."

// example is one ```yaml block of the README and the outcome its first line states:
//
//	# Accepted. ...                                   no warning
//	# Accepted, with a warning: TEXT                  exactly that warning (a part of it)
//	# Accepted, with warnings: TEXT; TEXT             exactly those
//	# Refused: FIELD: TEXT                            Invalid, naming FIELD, saying TEXT,
//	                                                  by the API server itself
type example struct {
	line     int // of the block's first line in the README, for messages
	object   *unstructured.Unstructured
	refused  bool
	field    string
	says     string
	warnings []string
}

var outcome = regexp.MustCompile(`^# (Accepted|Refused)(, with (a warning|warnings))?[.:]\s*(.*)$`)

// readExamples reads every ```yaml block of path; a block that does not start with an
// outcome line is an error, so that no example goes unchecked.
func readExamples(path string) ([]example, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var (
		out     []example
		block   []string
		inBlock bool
		start   int
	)
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case !inBlock && strings.TrimSpace(line) == "```yaml":
			inBlock, block, start = true, nil, n+1
		case inBlock && strings.TrimSpace(line) == "```":
			inBlock = false
			ex, err := parseExample(block, start)
			if err != nil {
				return nil, fmt.Errorf("%s:%d: %w", path, start, err)
			}
			out = append(out, ex)
		case inBlock:
			block = append(block, line)
		}
	}
	return out, sc.Err()
}

func parseExample(block []string, line int) (example, error) {
	ex := example{line: line}
	if len(block) == 0 {
		return ex, errors.New("an empty YAML block")
	}
	m := outcome.FindStringSubmatch(block[0])
	if m == nil {
		return ex, fmt.Errorf("the block's first line %q does not state its outcome (# Accepted. / # Accepted, with a warning: ... / # Refused: FIELD: ...)", block[0])
	}
	rest := strings.TrimSpace(m[4])
	switch {
	case m[1] == "Refused":
		ex.refused = true
		field, says, ok := strings.Cut(rest, ": ")
		if !ok {
			return ex, fmt.Errorf("%q: want # Refused: FIELD: what the refusal says", block[0])
		}
		ex.field, ex.says = field, says
	case m[2] != "":
		for _, w := range strings.Split(rest, "; ") {
			ex.warnings = append(ex.warnings, strings.TrimSpace(w))
		}
		if (m[3] == "a warning") != (len(ex.warnings) == 1) {
			return ex, fmt.Errorf("%q: %q but %d listed", block[0], m[3], len(ex.warnings))
		}
	}
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(strings.Join(block, "\n")), &u.Object); err != nil {
		return ex, err
	}
	ex.object = u
	return ex, nil
}

// TestREADMEExamples applies each YAML example of the README, in a namespace of its own,
// and checks the outcome its first line states (issue 35: the README said the API server
// refused what it accepted with a warning).
func TestREADMEExamples(t *testing.T) {
	examples, err := readExamples(repoRoot + "/README.md")
	if err != nil {
		t.Fatal(err)
	}
	if len(examples) < 4 {
		t.Fatalf("%d YAML examples in the README, want at least the accepted, refused and warned ones", len(examples))
	}
	cfg := startCluster(t)
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	admin, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}

	for _, ex := range examples {
		t.Run(fmt.Sprintf("line %d %s", ex.line, ex.object.GetName()), func(t *testing.T) {
			ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "readme-"}}
			if err := admin.Create(context.Background(), ns); err != nil {
				t.Fatal(err)
			}
			seen := &testutil.Warnings{}
			c := rest.CopyConfig(cfg)
			c.WarningHandler = seen
			cl, err := client.New(c, client.Options{Scheme: runtime.NewScheme()})
			if err != nil {
				t.Fatal(err)
			}
			obj := ex.object.DeepCopy()
			obj.SetNamespace(ns.Name)
			err = cl.Create(context.Background(), obj)
			warnings := seen.Take()
			if ex.refused {
				checkRefusal(t, ex, err)
				return
			}
			if err != nil {
				t.Fatalf("the README says accepted; the API server says %v", err)
			}
			checkWarnings(t, ex, warnings)
		})
	}
}

func checkRefusal(t *testing.T, ex example, err error) {
	t.Helper()
	switch {
	case err == nil:
		t.Fatalf("the README says refused (%s: %s); the API server accepted it", ex.field, ex.says)
	case !apierrors.IsInvalid(err):
		t.Fatalf("refused with %v, want Invalid", err)
	case !strings.Contains(err.Error(), ex.field) || !strings.Contains(err.Error(), ex.says):
		t.Errorf("the README says refused naming %s, saying %q; the API server said %q", ex.field, ex.says, err)
	case strings.Contains(err.Error(), "admission webhook"):
		// The README says the API server refuses it itself, webhooks or not.
		t.Errorf("refused by a webhook, not the API server's own schema or policies: %v", err)
	}
}

func checkWarnings(t *testing.T, ex example, got []string) {
	t.Helper()
	if len(got) != len(ex.warnings) {
		t.Errorf("the README lists %d warnings %q; the API server gave %d: %q", len(ex.warnings), ex.warnings, len(got), got)
	}
	for _, want := range ex.warnings {
		found := false
		for _, w := range got {
			found = found || strings.Contains(w, want)
		}
		if !found {
			t.Errorf("no warning says %q; the API server's: %q", want, got)
		}
	}
}

// startCluster starts a control plane with the CRDs, the admission policies and the
// webhook configurations, and the operator's webhooks served by a manager in this
// process, as config/default deploys them.
func startCluster(t *testing.T) *rest.Config {
	t.Helper()
	ctrllog.SetLogger(logr.Discard())
	env, err := testenv.New(repoRoot)
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal(err)
		}
		t.Skipf("SKIPPED: no control plane (run hack/envtest.sh, or set KUBEBUILDER_ASSETS): %v", err)
	}
	env.WebhookInstallOptions = envtest.WebhookInstallOptions{Paths: []string{repoRoot + "/config/webhook/manifests.yaml"}}
	cfg, err := testenv.Start(env)
	if err != nil {
		t.Fatalf("start envtest: %v", err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	if err := testenv.InstallPolicies(cfg, repoRoot); err != nil {
		t.Fatal(err)
	}

	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(resiliencev1alpha1.AddToScheme(scheme))
	wio := env.WebhookInstallOptions
	opts := webhook.DefaultOptions()
	opts.CertMode = webhook.CertModeExternal
	opts.Host, opts.Port, opts.CertDir = wio.LocalServingHost, wio.LocalServingPort, wio.LocalServingCertDir
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		WebhookServer:          opts.NewServer(),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := webhook.Setup(mgr, opts); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})
	addr := net.JoinHostPort(opts.Host, strconv.Itoa(opts.Port))
	testutil.Eventually(t, time.Minute, "the webhook server answers at "+addr, func() error {
		conn, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // envtest's own CA; only whether it answers matters
		if err == nil {
			_ = conn.Close()
		}
		return err
	})
	return cfg
}
