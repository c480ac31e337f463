package cluster

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// kubectl runs the kubectl binary as the cluster's admin, with its discovery cache in a
// directory of the spec's own (kubectl otherwise writes ~/.kube/cache on the host), and
// returns what it printed, stdout and stderr together.
func kubectl(ctx context.Context, stdin string, args ...string) (string, error) {
	cache := GinkgoT().TempDir()
	cmd := exec.CommandContext(ctx, *kubectlBin, append([]string{"--cache-dir", cache}, args...)...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+os.Getenv("KUBECONFIG"))
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	GinkgoWriter.Printf("$ kubectl %s\n%s", strings.Join(args, " "), out.String())
	return out.String(), err
}

// needKubectl fails (under CI) or skips the spec when there is no kubectl to run.
func needKubectl() {
	if _, err := exec.LookPath(*kubectlBin); err != nil {
		unavailable("no kubectl (%s: %v): hack/cluster.sh builds one; pass -kubectl or KUBECTL", *kubectlBin, err)
	}
}

// timings are what the suite measured, in the order measured; AfterSuite prints them and
// appends them to -timings.
var timings struct {
	sync.Mutex
	rows []string
}

func record(what string, d time.Duration, note string) {
	timings.Lock()
	defer timings.Unlock()
	row := fmt.Sprintf("| %s | %.1f s | %s |", what, d.Seconds(), note)
	timings.rows = append(timings.rows, row)
	AddReportEntry(what, fmt.Sprintf("%v (%s)", d.Round(time.Millisecond), note))
}

var _ = AfterSuite(func() {
	timings.Lock()
	defer timings.Unlock()
	if len(timings.rows) == 0 {
		return
	}
	table := "| measured | time | detail |\n| --- | --- | --- |\n" + strings.Join(timings.rows, "\n") + "\n"
	fmt.Fprintf(GinkgoWriter, "\nTimings on this node:\n%s", table)
	AddReportEntry("timings", table)
	if *timingsOut != "" {
		f, err := os.OpenFile(*timingsOut, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		Expect(err).NotTo(HaveOccurred())
		defer f.Close()
		_, err = fmt.Fprintf(f, "%s run %s\n%s", "<!-- test/cluster -->", time.Now().UTC().Format(time.RFC3339), table)
		Expect(err).NotTo(HaveOccurred())
	}
})

// pods lists the pods of namespace matching the labels, sorted by name, ignoring those on
// their way out.
func pods(ctx context.Context, namespace string, labels client.MatchingLabels) []corev1.Pod {
	var list corev1.PodList
	Expect(k8s.List(ctx, &list, client.InNamespace(namespace), labels)).To(Succeed())
	var live []corev1.Pod
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil {
			live = append(live, p)
		}
	}
	sort.Slice(live, func(i, j int) bool { return live[i].Name < live[j].Name })
	return live
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// running reports whether every container of p runs.
func running(p *corev1.Pod) bool {
	if p.Status.Phase != corev1.PodRunning || len(p.Status.ContainerStatuses) == 0 {
		return false
	}
	for _, c := range p.Status.ContainerStatuses {
		if c.State.Running == nil {
			return false
		}
	}
	return true
}

func restarts(p *corev1.Pod) int32 {
	var n int32
	for _, c := range p.Status.ContainerStatuses {
		n += c.RestartCount
	}
	return n
}

func names(ps []corev1.Pod) []string {
	out := make([]string, len(ps))
	for i := range ps {
		out[i] = ps[i].Name
	}
	return out
}

// podClient reaches pods directly, never through a proxy the environment may name.
var podClient = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{}}

// setUpstream sets the health of the example's upstream in each pod, through the control
// endpoint the suite turns on (CONTROL_ADDR): up, down or flapping. The suite runs inside
// the cluster's network namespace, where pod addresses are reachable.
func setUpstream(ctx context.Context, ps []corev1.Pod, health string) {
	GinkgoHelper()
	for _, p := range ps {
		Expect(p.Status.PodIP).NotTo(BeEmpty(), "pod %s has no IP", p.Name)
		Eventually(func() error {
			req, err := http.NewRequestWithContext(ctx, http.MethodPut, "http://"+p.Status.PodIP+":8080/upstream", strings.NewReader(health))
			if err != nil {
				return err
			}
			resp, err := podClient.Do(req)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("%s: %s", resp.Status, body)
			}
			return nil
		}).WithContext(ctx).WithTimeout(20*time.Second).Should(Succeed(), "set the upstream of pod %s %s", p.Name, health)
	}
}

// podLog is the output of the pod's container since the given time (all of it when zero),
// as `kubectl logs` shows it.
func podLog(ctx context.Context, p *corev1.Pod, since time.Time) (string, error) {
	opts := &corev1.PodLogOptions{}
	if !since.IsZero() {
		t := metav1.NewTime(since)
		opts.SinceTime = &t
	}
	b, err := clientset.CoreV1().Pods(p.Namespace).GetLogs(p.Name, opts).DoRaw(ctx)
	return string(b), err
}

// lastLine is the last line of log that contains substr, or "".
func lastLine(log, substr string) string {
	lines := strings.Split(log, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.Contains(lines[i], substr) {
			return lines[i]
		}
	}
	return ""
}

// A failed spec leaves what a person would look at first: the pods, the recent Events,
// and the tail of the managers' logs.
var _ = ReportAfterEach(func(r SpecReport) {
	if !r.Failed() || k8s == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var all corev1.PodList
	if err := k8s.List(ctx, &all); err == nil {
		for _, p := range all.Items {
			fmt.Fprintf(GinkgoWriter, "pod %s/%s phase=%s ready=%v restarts=%d ip=%s deleting=%v\n",
				p.Namespace, p.Name, p.Status.Phase, podReady(&p), restarts(&p), p.Status.PodIP, p.DeletionTimestamp != nil)
		}
	}
	var events corev1.EventList
	if err := k8s.List(ctx, &events); err == nil {
		sort.Slice(events.Items, func(i, j int) bool { return eventTime(&events.Items[i]).Before(eventTime(&events.Items[j])) })
		from := max(0, len(events.Items)-40)
		for _, e := range events.Items[from:] {
			fmt.Fprintf(GinkgoWriter, "event %s %s/%s %s %s: %s\n", eventTime(&e).Format(time.TimeOnly), e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Type, e.Reason, e.Message)
		}
	}
	var managers corev1.PodList
	_ = k8s.List(ctx, &managers, client.InNamespace(operatorNamespace), managerLabels)
	for _, p := range managers.Items {
		tail := int64(40)
		b, err := clientset.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{TailLines: &tail}).DoRaw(ctx)
		fmt.Fprintf(GinkgoWriter, "--- log of %s (err %v)\n%s\n", p.Name, err, b)
	}
})

func eventTime(e *corev1.Event) time.Time {
	switch {
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	}
	return e.CreationTimestamp.Time
}
