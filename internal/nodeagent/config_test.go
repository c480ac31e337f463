package nodeagent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fusebox-dev/fusebox/pkg/breaker"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakertest"
	"github.com/fusebox-dev/fusebox/pkg/breaker/kube"
	"github.com/fusebox-dev/fusebox/pkg/breaker/registry"
)

// appPod is an application pod wired to the node's agent as the injection webhook wires
// one: pkg/breaker/kube with the agent's URL and the pod's projected token, and no API
// access of its own.
type appPod struct {
	pod    *corev1.Pod
	agent  *kube.Connection
	reg    *registry.Registry
	cancel context.CancelFunc
}

func startAppPod(t *testing.T, a *runningAgent, pod *corev1.Pod, clock *breakertest.Clock, breakers ...string) *appPod {
	t.Helper()
	o := kube.Options{
		NodeAgent:      a.url,
		NodeAgentToken: writeTokenFile(t, podToken(t, pod, breakerconfig.NodeAgentAudience)),
		Logger:         testLogger(t, pod.Name),
	}
	if clock != nil {
		o.BreakerOptions = []breaker.Option{breaker.WithClock(clock)}
	}
	ctx, cancel := context.WithCancel(context.Background())
	ka, err := kube.Connect(ctx, o)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	p := &appPod{pod: pod, agent: ka, reg: ka.Registry(), cancel: cancel}
	for _, b := range breakers {
		p.reg.Get(b)
	}
	t.Cleanup(p.stop)
	return p
}

func (p *appPod) stop() {
	p.cancel()
	<-p.agent.Done()
}

// writeConfigMap creates or replaces the namespace's fusebox-breakers ConfigMap, as the
// operator renders it.
func writeConfigMap(t *testing.T, ns string, docs map[string]breaker.Policy, gen int64) {
	t.Helper()
	data := map[string]string{}
	for name, p := range docs {
		doc, err := breakerconfig.Marshal(kube.ConfigOf(name, gen, p, breakerconfig.ScopePod))
		must(t, err)
		data[breakerconfig.Key(name)] = string(doc)
	}
	ctx := context.Background()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: breakerconfig.ConfigMapName}}
	err := k8sClient.Get(ctx, client.ObjectKeyFromObject(cm), cm)
	cm.Data = data
	switch {
	case apierrors.IsNotFound(err):
		err = k8sClient.Create(ctx, cm)
	case err == nil:
		err = k8sClient.Update(ctx, cm)
	}
	must(t, err)
}

func policyIs(pods []*appPod, name string, want breaker.Policy) error {
	for _, p := range pods {
		if got := p.reg.Get(name).Policy(); got != want {
			return fmt.Errorf("pod %s runs %+v, want %+v", p.pod.Name, got, want)
		}
	}
	return nil
}

// TestConfigStreams: the namespaces' published config reaches their pods through the
// agent, each change as it is made, over one ConfigMap watch per namespace however many
// pods stream it; the watch stops when its namespace's last stream ends.
func TestConfigStreams(t *testing.T) {
	t.Parallel()
	node := newNode(t)
	shop, blog := newNamespace(t), newNamespace(t)
	agent := startAgent(t, node, agentOptions{})
	var shopPods []*appPod
	for i := range 3 {
		shopPods = append(shopPods, startAppPod(t, agent, newPod(t, shop, fmt.Sprintf("checkout-%d", i), node.Name), nil, "payments"))
	}
	blogPod := startAppPod(t, agent, newPod(t, blog, "writer", node.Name), nil, "payments")
	eventually(t, "every pod streaming", func() error {
		if s := agent.Stats(); s.ConfigWatches != 2 {
			return fmt.Errorf("%d namespace watches, want 2", s.ConfigWatches)
		}
		for _, p := range append(shopPods, blogPod) {
			if !p.agent.Loaded() {
				return fmt.Errorf("pod %s has no config yet", p.pod.Name)
			}
		}
		return nil
	})

	p1 := breaker.DefaultPolicy()
	p1.MinimumThroughput = 4
	writeConfigMap(t, shop, map[string]breaker.Policy{"payments": p1}, 1)
	eventually(t, "the first config", func() error { return policyIs(shopPods, "payments", p1) })
	p2 := p1
	p2.OpenTimeout = time.Minute
	writeConfigMap(t, shop, map[string]breaker.Policy{"payments": p2}, 2)
	eventually(t, "the change", func() error { return policyIs(shopPods, "payments", p2) })
	if err := policyIs([]*appPod{blogPod}, "payments", breaker.DefaultPolicy()); err != nil {
		t.Errorf("another namespace's config reached the blog: %v", err)
	}
	writeConfigMap(t, blog, map[string]breaker.Policy{"payments": p1}, 1)
	eventually(t, "the blog's own config", func() error { return policyIs([]*appPod{blogPod}, "payments", p1) })

	// One watch per namespace on the API server, for three pods and one.
	if n := agent.writes.count("WATCH configmaps " + shop); n < 1 || n > 2 {
		t.Errorf("%d ConfigMap watches of %s for three pods, want one (two if the API server ended one)", n, shop)
	}
	if s := agent.Stats(); s.ConfigWatchesStarted != 2 {
		t.Errorf("%d namespace watches started, want 2", s.ConfigWatchesStarted)
	}

	// A GET without watch answers once.
	status, body := call(t, http.MethodGet, agent.url+breakerconfig.AgentConfigPath, podToken(t, shopPods[0].pod, breakerconfig.NodeAgentAudience), nil)
	var snap breakerconfig.ConfigSnapshot
	if status != http.StatusOK || json.Unmarshal(body, &snap) != nil || !snap.Exists || snap.Agent != agent.ID() || snap.Data[breakerconfig.Key("payments")] == "" {
		t.Errorf("GET config: %d %s", status, body)
	}

	for _, p := range shopPods {
		p.stop()
	}
	eventually(t, "the shop's watch stopped with its last stream", func() error {
		if s := agent.Stats(); s.ConfigWatches != 1 {
			return fmt.Errorf("%d namespace watches, want 1", s.ConfigWatches)
		}
		return nil
	})
	blogPod.stop()
	eventually(t, "no watch left", func() error {
		if s := agent.Stats(); s.ConfigWatches != 0 {
			return errors.New("still watching")
		}
		return nil
	})
}
