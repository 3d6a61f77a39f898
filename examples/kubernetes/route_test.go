package kubernetes_test

import (
	"bufio"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/leasehold/leasehold/client/leaserun"
	"github.com/leasehold/leasehold/internal/cli"
	"github.com/leasehold/leasehold/internal/endpoint"
	"github.com/leasehold/leasehold/internal/harness/lockedbuf"
)

// heldHereRE matches the path of a held-here probe; the task is as the path
// spells it (percent-encoded).
var heldHereRE = regexp.MustCompile(`^/v1/leases/([^/]+)/held-here$`)

// holderProbe returns the app container whose readiness probe asks
// held-here, and the task it names; ok is false when none does.
func holderProbe(t *testing.T, spec corev1.PodSpec) (app corev1.Container, task string, ok bool) {
	t.Helper()
	for _, c := range spec.Containers {
		rp := c.ReadinessProbe
		if rp == nil || rp.HTTPGet == nil {
			continue
		}
		m := heldHereRE.FindStringSubmatch(rp.HTTPGet.Path)
		if m == nil {
			continue
		}
		task, err := url.PathUnescape(m[1])
		if err != nil {
			t.Fatalf("%s: readiness probe path %q: %v", c.Name, rp.HTTPGet.Path, err)
		}
		return c, task, true
	}
	return corev1.Container{}, "", false
}

// hasPort says whether port p, as a Service's targetPort or a probe names
// it, is one c declares.
func hasPort(c corev1.Container, p intstr.IntOrString) bool {
	return slices.ContainsFunc(c.Ports, func(cp corev1.ContainerPort) bool {
		if p.Type == intstr.Int {
			return cp.ContainerPort == p.IntVal
		}
		return cp.Name == p.StrVal
	})
}

// Every Service selects its Deployment's pods, sends to a port of the app
// container, never to the sidecar's (that would open the lease API, or the
// probes, to the Service's clients), and leaves pods that are not Ready out:
// in route-to-holder, readiness is what picks the holder.
func TestServicesRouteToTheApp(t *testing.T) {
	forEachExample(t, servicesRouteToTheApp)
}

func servicesRouteToTheApp(t *testing.T, dir string) {
	m := load(t, dir)
	if dir == routeDir && len(m.services) == 0 {
		t.Fatal("no Service to route to the holder")
	}
	d := deployment(t, m)
	spec := d.Spec.Template.Spec
	sc := sidecarContainer(t, spec)
	for _, svc := range m.services {
		sel := labels.SelectorFromSet(svc.Spec.Selector)
		if len(svc.Spec.Selector) == 0 || !sel.Matches(labels.Set(d.Spec.Template.Labels)) {
			t.Errorf("Service %s selector %v does not select the pods of Deployment %s (%v)", svc.Name, svc.Spec.Selector, d.Name, d.Spec.Template.Labels)
		}
		if svc.Spec.PublishNotReadyAddresses {
			t.Errorf("Service %s publishes pods that are not Ready: every replica, not only the holder, would get traffic", svc.Name)
		}
		if len(svc.Spec.Ports) == 0 {
			t.Errorf("Service %s has no port", svc.Name)
		}
		for _, p := range svc.Spec.Ports {
			target := p.TargetPort
			if target.IntVal == 0 && target.StrVal == "" {
				target = intstr.FromInt32(p.Port)
			}
			if hasPort(sc, target) {
				t.Errorf("Service %s port %d targets the sidecar's port %s", svc.Name, p.Port, target.String())
			}
			if !slices.ContainsFunc(spec.Containers, func(c corev1.Container) bool { return hasPort(c, target) }) {
				t.Errorf("Service %s port %d targets %s, which no app container declares", svc.Name, p.Port, target.String())
			}
		}
	}
}

// route-to-holder's app container is Ready only while its pod's sidecar
// holds the lease its `leasehold run` holds: the readiness probe asks the
// sidecar's probe listener (on the pod's IP, at a fixed port) held-here for
// the task the app's `leasehold run --task` names. The app's command line
// is run, with its environment, against a real sidecar that requires the
// Secret's token, a stand-in for the server after `--`; the probe's path,
// asked as the kubelet asks it (no token, the pod's IP as Host), answers
// 503 before the run, 200 while it runs, and 503 after.
func TestRouteToHolder(t *testing.T) {
	t.Parallel()
	m := load(t, routeDir)
	spec := deployment(t, m).Spec.Template.Spec
	sc := sidecarContainer(t, spec)
	cfg, _ := serveConfig(t, m, sc)
	if cfg.ProbeListen == "" {
		t.Fatalf("%s has no --probe-listen: the kubelet sends no token, which held-here needs on --listen", sc.Name)
	}
	host, p, err := net.SplitHostPort(cfg.ProbeListen)
	if err != nil {
		t.Fatal(err)
	}
	if ip := net.ParseIP(host); host != "" && (ip == nil || !ip.IsUnspecified()) {
		t.Errorf("--probe-listen %s: the kubelet probes the pod's IP, not %s; listen on 0.0.0.0", cfg.ProbeListen, host)
	}
	probePort, err := strconv.Atoi(p)
	if err != nil || probePort == 0 {
		t.Fatalf("--probe-listen %s: want a fixed port, which the app's probe can name", cfg.ProbeListen)
	}
	if listenPort(t, sc, cfg) == int32(probePort) {
		t.Fatalf("--probe-listen and --listen on the same port %d", probePort)
	}

	app, task, ok := holderProbe(t, spec)
	if !ok {
		t.Fatal("no app container has a readiness probe on /v1/leases/{task}/held-here")
	}
	g := app.ReadinessProbe.HTTPGet
	if g.Scheme != "" && g.Scheme != corev1.URISchemeHTTP {
		t.Errorf("readiness probe scheme %s: leasehold serves plain HTTP", g.Scheme)
	}
	if g.Port.Type != intstr.Int || g.Port.IntVal != int32(probePort) {
		// A named port would be looked up among the app container's own.
		t.Errorf("%s's readiness probe asks port %s, want the sidecar's probe listener, %d", app.Name, g.Port.String(), probePort)
	}

	argv := append(slices.Clone(app.Command), app.Args...)
	if len(argv) < 2 || path.Base(argv[0]) != "leasehold" || argv[1] != "run" {
		t.Fatalf("%s runs %q, want leasehold run … -- SERVER", app.Name, argv)
	}
	sep := slices.Index(argv, "--")
	if sep < 0 || sep == len(argv)-1 {
		t.Fatalf("%s runs %q: no command after --", app.Name, argv)
	}
	runArgs := argv[2:sep]
	if got := flagValue(runArgs, "task"); got != task {
		t.Errorf("%s holds task %q (leasehold run --task), but its readiness probe asks about %q", app.Name, got, task)
	}
	// A replica that does not get the lease waits for it: a wait that runs
	// out exits 75, and the kubelet restarts the container with a back-off
	// that grows to 5 minutes, which would delay its taking over.
	wait, err := time.ParseDuration(flagValue(runArgs, "wait"))
	if err != nil || wait < 24*time.Hour {
		t.Errorf("%s: leasehold run --wait %q, want a day or more (the holder may live that long)", app.Name, flagValue(runArgs, "wait"))
	}

	env, _ := m.environment(t, app)
	secret, key := mountedSecretFile(t, spec, app, env[cli.EnvName("token-file")])
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(m.secretValue(t, secret, key)), 0o600); err != nil {
		t.Fatal(err)
	}
	token, err := endpoint.ReadTokenFile(tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	srv := realServer(t, string(token))
	api := httptest.NewServer(srv.Handler())
	t.Cleanup(api.Close)
	probe := httptest.NewServer(srv.ProbeHandler())
	t.Cleanup(probe.Close)
	kubelet := func() int {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, probe.URL+g.Path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = net.JoinHostPort("10.244.0.7", strconv.Itoa(probePort))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	await := func(want int, when string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for code := kubelet(); code != want; code = kubelet() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: GET %s answers %d, want %d", when, g.Path, code, want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	if code := kubelet(); code != http.StatusServiceUnavailable {
		t.Fatalf("before the run: GET %s answers %d, want 503", g.Path, code)
	}

	// The app's leasehold run, its LEASEHOLD_ADDR pointed at the test's
	// sidecar and its token file at the Secret's value.
	getenv := func(k string) string {
		switch k {
		case cli.EnvName("addr"):
			return api.URL
		case cli.EnvName("token-file"):
			return tokenFile
		}
		return env[k]
	}
	stdinR, stdinW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdinR.Close()
	stdoutR, stdoutW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdoutR.Close()
	var stderr lockedbuf.Buffer
	done := make(chan int, 1)
	go func() {
		done <- leaserun.Main(t.Context(), append(slices.Clone(runArgs), "--", "sh", "-c", "echo started; exec cat >/dev/null"), getenv, stdinR, stdoutW, &stderr)
		stdoutW.Close()
	}()
	line, err := bufio.NewReader(stdoutR).ReadString('\n')
	if err != nil || line != "started\n" {
		stdinW.Close()
		t.Fatalf("the app's leasehold run did not start its command (%q, %v):\n%s", line, err, stderr.String())
	}
	await(http.StatusOK, "while the app's leasehold run holds the lease")
	stdinW.Close()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("the app's leasehold run exited %d:\n%s", code, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the app's leasehold run did not end with its command:\n%s", stderr.String())
	}
	await(http.StatusServiceUnavailable, "after the run")
}

// flagValue is the value of --name (or -name, or --name=V) in args, or "".
func flagValue(args []string, name string) string {
	for i, a := range args {
		a = strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-")
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v
		}
		if a == name && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}

// Only the holder's pod is ever Ready, so a rolling update must not wait
// for new pods to be Ready before it stops old ones: it would wait for
// ever, the old holder keeping the lease. The Deployment's strategy must
// let every old pod go at once (maxUnavailable of all the replicas), or
// recreate.
func TestRouteToHolderRollout(t *testing.T) {
	t.Parallel()
	d := deployment(t, load(t, routeDir))
	if _, _, ok := holderProbe(t, d.Spec.Template.Spec); !ok {
		t.Fatal("no app container has a readiness probe on held-here")
	}
	if d.Spec.Strategy.Type == appsv1.RecreateDeploymentStrategyType {
		return
	}
	replicas := 1
	if d.Spec.Replicas != nil {
		replicas = int(*d.Spec.Replicas)
	}
	maxUnavailable := intstr.FromString("25%") // the API's default
	if ru := d.Spec.Strategy.RollingUpdate; ru != nil && ru.MaxUnavailable != nil {
		maxUnavailable = *ru.MaxUnavailable
	}
	// The Deployment controller rounds maxUnavailable down.
	n, err := intstr.GetScaledValueFromIntOrPercent(&maxUnavailable, replicas, false)
	if err != nil {
		t.Fatal(err)
	}
	if n < replicas {
		t.Errorf("maxUnavailable %s of %d replicas lets a rolling update stop only %d old pods before new ones are Ready, "+
			"but only the holder is ever Ready: it would never finish; use 100%% or type Recreate", maxUnavailable.String(), replicas, n)
	}
}
