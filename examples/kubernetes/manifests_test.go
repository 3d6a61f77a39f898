package kubernetes_test

import (
	"bufio"
	"bytes"
	"cmp"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/leasehold/leasehold/client/leaserun"
	"github.com/leasehold/leasehold/internal/cli"
	"github.com/leasehold/leasehold/internal/endpoint"
	"github.com/leasehold/leasehold/leasecore/storeurl"
	"github.com/leasehold/leasehold/sidecar"
)

const (
	kustomizationFile = "kustomization.yaml"
	sidecarName       = "leasehold"
	// routeDir is the example whose Service routes to the lease's holder.
	routeDir = "route-to-holder"
)

// exampleDirs are the examples these tests check: this directory and each
// subdirectory with a kustomization.yaml, each a set of manifests that
// `kubectl apply -k` applies on its own.
func exampleDirs(t *testing.T) []string {
	t.Helper()
	subs, err := filepath.Glob(filepath.Join("*", kustomizationFile))
	if err != nil {
		t.Fatal(err)
	}
	dirs := []string{"."}
	for _, k := range subs {
		dirs = append(dirs, filepath.Dir(k))
	}
	if !slices.Contains(dirs, routeDir) {
		t.Fatalf("examples %q: no %s", dirs, routeDir)
	}
	return dirs
}

// forEachExample runs check on every example, each in a parallel subtest
// named after its directory.
func forEachExample(t *testing.T, check func(t *testing.T, dir string)) {
	t.Parallel()
	for _, dir := range exampleDirs(t) {
		name := dir
		if dir == "." {
			name = "kubernetes"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			check(t, dir)
		})
	}
}

// manifests is every object of an example's manifests, decoded strictly.
type manifests struct {
	deployments []*appsv1.Deployment
	services    []*corev1.Service
	secrets     map[string]*corev1.Secret
}

// load decodes every document of every manifest in dir (all *.yaml files
// but kustomization.yaml) strictly into its Kubernetes API type: an unknown
// or misspelt field, or a kind this test does not know, fails.
func load(t *testing.T, dir string) manifests {
	t.Helper()
	files := manifestFiles(t, dir)
	if len(files) == 0 {
		t.Fatalf("%s: no manifests", dir)
	}
	m := manifests{secrets: map[string]*corev1.Secret{}}
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
		for i := 0; ; i++ {
			doc, err := r.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: document %d: %v", file, i, err)
			}
			if len(bytes.TrimSpace(stripComments(doc))) == 0 {
				continue
			}
			var tm metav1.TypeMeta
			if err := yaml.Unmarshal(doc, &tm); err != nil {
				t.Fatalf("%s: document %d: %v", file, i, err)
			}
			strict := func(into any) {
				if err := yaml.UnmarshalStrict(doc, into); err != nil {
					t.Fatalf("%s: document %d (%s %s): %v", file, i, tm.APIVersion, tm.Kind, err)
				}
			}
			switch tm.GroupVersionKind() {
			case appsv1.SchemeGroupVersion.WithKind("Deployment"):
				var d appsv1.Deployment
				strict(&d)
				m.deployments = append(m.deployments, &d)
			case corev1.SchemeGroupVersion.WithKind("Service"):
				var svc corev1.Service
				strict(&svc)
				m.services = append(m.services, &svc)
			case corev1.SchemeGroupVersion.WithKind("Secret"):
				var s corev1.Secret
				strict(&s)
				if _, dup := m.secrets[s.Name]; dup {
					t.Fatalf("%s: Secret %s is defined twice", file, s.Name)
				}
				m.secrets[s.Name] = &s
			default:
				t.Fatalf("%s: document %d: apiVersion %q kind %q: this test knows Deployment (apps/v1), Service and Secret (v1) only", file, i, tm.APIVersion, tm.Kind)
			}
		}
	}
	return m
}

func stripComments(doc []byte) []byte {
	var out []byte
	for line := range bytes.Lines(doc) {
		if t := bytes.TrimSpace(line); len(t) > 0 && t[0] != '#' {
			out = append(out, line...)
		}
	}
	return out
}

// manifestFiles are the paths of dir's manifests.
func manifestFiles(t *testing.T, dir string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	yml, _ := filepath.Glob(filepath.Join(dir, "*.yml"))
	if len(yml) > 0 {
		t.Fatalf("%q: name manifests *.yaml, which this test reads", yml)
	}
	return slices.DeleteFunc(files, func(f string) bool { return filepath.Base(f) == kustomizationFile })
}

// manifestNames are the names of dir's manifests, as its kustomization.yaml
// lists them.
func manifestNames(t *testing.T, dir string) []string {
	t.Helper()
	var names []string
	for _, f := range manifestFiles(t, dir) {
		names = append(names, filepath.Base(f))
	}
	return names
}

// secretValue is a Secret's value for key, from data or stringData.
func (m manifests) secretValue(t *testing.T, name, key string) string {
	t.Helper()
	s, ok := m.secrets[name]
	if !ok {
		t.Fatalf("Secret %s is referenced but not defined in the manifests", name)
	}
	if v, ok := s.StringData[key]; ok {
		return v
	}
	if v, ok := s.Data[key]; ok {
		return string(v)
	}
	t.Fatalf("Secret %s has no key %q", name, key)
	return ""
}

// environment resolves a container's env: literal values, and secretKeyRefs
// from the manifests' Secrets. It records which variables came from a Secret.
func (m manifests) environment(t *testing.T, c corev1.Container) (env map[string]string, fromSecret map[string]bool) {
	t.Helper()
	if len(c.EnvFrom) > 0 {
		t.Fatalf("container %s uses envFrom: name each variable, so that this test can check it", c.Name)
	}
	env, fromSecret = map[string]string{}, map[string]bool{}
	for _, e := range c.Env {
		if _, dup := env[e.Name]; dup {
			t.Errorf("container %s sets %s twice", c.Name, e.Name)
		}
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = e.Value
		case e.ValueFrom.SecretKeyRef != nil:
			ref := e.ValueFrom.SecretKeyRef
			env[e.Name] = m.secretValue(t, ref.Name, ref.Key)
			fromSecret[e.Name] = true
		default:
			t.Fatalf("container %s: %s comes from neither a value nor a Secret", c.Name, e.Name)
		}
	}
	return env, fromSecret
}

func deployment(t *testing.T, m manifests) *appsv1.Deployment {
	t.Helper()
	if len(m.deployments) != 1 {
		t.Fatalf("%d Deployments, want 1", len(m.deployments))
	}
	return m.deployments[0]
}

func sidecarContainer(t *testing.T, spec corev1.PodSpec) corev1.Container {
	t.Helper()
	i := slices.IndexFunc(spec.InitContainers, func(c corev1.Container) bool { return c.Name == sidecarName })
	if i < 0 {
		if slices.ContainsFunc(spec.Containers, func(c corev1.Container) bool { return c.Name == sidecarName }) {
			t.Fatalf("%s is an app container: make it a native sidecar (an init container with restartPolicy: Always), so that it starts before the app and stops after it", sidecarName)
		}
		t.Fatalf("no init container %s", sidecarName)
	}
	return spec.InitContainers[i]
}

// serveConfig parses the sidecar's args and environment as `leasehold
// serve` does (its own flags, then LEASEHOLD_<FLAG> for those the command
// line left out) and validates the result.
func serveConfig(t *testing.T, m manifests, c corev1.Container) (sidecar.Config, map[string]bool) {
	t.Helper()
	if len(c.Command) != 0 {
		t.Fatalf("%s overrides the image's entrypoint (%q): its args would not go to leasehold", c.Name, c.Command)
	}
	if len(c.Args) == 0 || c.Args[0] != "serve" {
		t.Fatalf("%s: args %q, want leasehold serve", c.Name, c.Args)
	}
	env, fromSecret := m.environment(t, c)
	fs := flag.NewFlagSet(c.Name+" serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cfg, err := sidecar.ParseServeArgs(fs, c.Args[1:], func(k string) string { return env[k] })
	if err != nil {
		t.Fatalf("%s: leasehold serve refuses its command line: %v", c.Name, err)
	}
	flags := map[string]bool{}
	fs.VisitAll(func(f *flag.Flag) { flags[cli.EnvName(f.Name)] = true })
	for k := range env {
		if strings.HasPrefix(k, cli.EnvPrefix) && !flags[k] {
			t.Errorf("%s: %s is no flag of leasehold serve", c.Name, k)
		}
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("%s: leasehold serve refuses its configuration: %v", c.Name, err)
	}
	return cfg, fromSecret
}

// mountedSecretFile returns the Secret and key a file path in a container
// reads, through a secret volume it mounts.
func mountedSecretFile(t *testing.T, spec corev1.PodSpec, c corev1.Container, file string) (secret, key string) {
	t.Helper()
	for _, vm := range c.VolumeMounts {
		rel, ok := strings.CutPrefix(file, strings.TrimSuffix(vm.MountPath, "/")+"/")
		if !ok {
			continue
		}
		i := slices.IndexFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == vm.Name })
		if i < 0 {
			t.Fatalf("%s mounts volume %s, which the pod does not define", c.Name, vm.Name)
		}
		src := spec.Volumes[i].Secret
		if src == nil {
			t.Fatalf("%s: %s is on volume %s, which is not a Secret", c.Name, file, vm.Name)
		}
		if vm.SubPath != "" {
			// A subPath mount does not see a rotated Secret.
			t.Fatalf("%s mounts %s with subPath", c.Name, vm.Name)
		}
		if len(src.Items) == 0 {
			return src.SecretName, rel
		}
		for _, it := range src.Items {
			if path.Clean(it.Path) == rel {
				return src.SecretName, it.Key
			}
		}
		t.Fatalf("%s: %s is in Secret volume %s, whose items %+v give no %s", c.Name, file, vm.Name, src.Items, rel)
	}
	t.Fatalf("%s: %s is on no volume the container mounts", c.Name, file)
	return "", ""
}

func TestKustomizationListsEveryManifest(t *testing.T) {
	forEachExample(t, kustomizationListsEveryManifest)
}

func kustomizationListsEveryManifest(t *testing.T, dir string) {
	data, err := os.ReadFile(filepath.Join(dir, kustomizationFile))
	if err != nil {
		t.Fatal(err)
	}
	var k struct {
		APIVersion string   `json:"apiVersion"`
		Kind       string   `json:"kind"`
		Resources  []string `json:"resources"`
	}
	if err := yaml.UnmarshalStrict(data, &k); err != nil {
		t.Fatalf("%s: %v", kustomizationFile, err)
	}
	if k.APIVersion != "kustomize.config.k8s.io/v1beta1" || k.Kind != "Kustomization" {
		t.Errorf("%s: apiVersion %q kind %q", kustomizationFile, k.APIVersion, k.Kind)
	}
	got, want := slices.Sorted(slices.Values(k.Resources)), manifestNames(t, dir)
	if !slices.Equal(got, want) {
		t.Errorf("%s lists %q, want every manifest: %q", kustomizationFile, got, want)
	}
}

func TestDeploymentSelectsItsPods(t *testing.T) {
	forEachExample(t, deploymentSelectsItsPods)
}

func deploymentSelectsItsPods(t *testing.T, dir string) {
	d := deployment(t, load(t, dir))
	sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	if err != nil {
		t.Fatal(err)
	}
	if sel.Empty() || !sel.Matches(labels.Set(d.Spec.Template.Labels)) {
		t.Errorf("selector %v does not select the pod template's labels %v", d.Spec.Selector, d.Spec.Template.Labels)
	}
}

// The sidecar is a native sidecar whose args and environment `leasehold
// serve` accepts, with the store URL from a Secret in the environment and
// the token from a Secret mounted as a file.
func TestSidecarConfiguration(t *testing.T) {
	forEachExample(t, sidecarConfiguration)
}

func sidecarConfiguration(t *testing.T, dir string) {
	m := load(t, dir)
	spec := deployment(t, m).Spec.Template.Spec
	c := sidecarContainer(t, spec)
	if c.RestartPolicy == nil || *c.RestartPolicy != corev1.ContainerRestartPolicyAlways {
		got := "unset"
		if c.RestartPolicy != nil {
			got = string(*c.RestartPolicy)
		}
		t.Errorf("init container %s has restartPolicy %s, want Always: without it the pod waits for it to exit before starting the app", c.Name, got)
	}
	cfg, fromSecret := serveConfig(t, m, c)

	storeEnv := cli.EnvName("store")
	if slices.ContainsFunc(c.Args, func(a string) bool {
		return a == "--store" || a == "-store" || strings.HasPrefix(a, "--store=") || strings.HasPrefix(a, "-store=")
	}) {
		t.Errorf("--store on the command line (args %q): its password would show in the pod spec; use %s from a Secret", c.Args, storeEnv)
	}
	if !fromSecret[storeEnv] {
		t.Errorf("%s does not come from a Secret", storeEnv)
	}
	if u, err := url.Parse(cfg.Store); err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		t.Errorf("store %s: want a postgres:// URL, the store every pod shares (an SQLite file would be each pod's own)", storeurl.Redact(cfg.Store))
	}

	if cfg.TokenFile == "" {
		t.Fatal("no --token-file") // Validate allows that only on loopback
	}
	secret, key := mountedSecretFile(t, spec, c, cfg.TokenFile)
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(m.secretValue(t, secret, key)), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := endpoint.ReadTokenFile(tokenFile); err != nil {
		t.Errorf("Secret %s key %s: leasehold serve would refuse it: %v", secret, key, err)
	}
	for _, v := range spec.Volumes {
		if v.Secret != nil && v.Secret.SecretName == secret && v.Secret.DefaultMode != nil && *v.Secret.DefaultMode&0o007 != 0 {
			t.Errorf("volume %s: defaultMode %#o lets any user in the pod's containers read the token; give others no access", v.Name, *v.Secret.DefaultMode)
		}
	}

	// The kubelet probes the pod's IP.
	host, _, err := net.SplitHostPort(cfg.Listen)
	if err != nil {
		t.Fatal(err)
	}
	if ip := net.ParseIP(host); host != "" && (ip == nil || !ip.IsUnspecified()) {
		t.Errorf("--listen %s: the kubelet probes the pod's IP, not %s; listen on 0.0.0.0", cfg.Listen, host)
	}

	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		if q, ok := c.Resources.Requests[r]; !ok || q.IsZero() {
			t.Errorf("%s requests no %s", c.Name, r)
		}
	}
	if lim, ok := c.Resources.Limits[corev1.ResourceMemory]; ok && lim.Cmp(c.Resources.Requests[corev1.ResourceMemory]) < 0 {
		t.Errorf("%s: memory limit %s below its request %s", c.Name, lim.String(), c.Resources.Requests.Memory())
	}
	if _, ok := c.Resources.Limits[corev1.ResourceCPU]; ok {
		t.Errorf("%s has a CPU limit: throttling would delay the renewals that keep its leases", c.Name)
	}
}

// The sidecar's Go runtime has a soft memory limit (GOMEMLIMIT) between
// what it requests and its container's limit: below the request, the
// collector would run without pause at the memory it is expected to use;
// at the limit, the kernel would kill it before the collector worked
// harder, since the runtime does not count the binary's own resident pages.
func TestSidecarMemoryLimit(t *testing.T) {
	forEachExample(t, sidecarMemoryLimit)
}

func sidecarMemoryLimit(t *testing.T, dir string) {
	m := load(t, dir)
	c := sidecarContainer(t, deployment(t, m).Spec.Template.Spec)
	env, _ := m.environment(t, c)
	raw, ok := env["GOMEMLIMIT"]
	if !ok {
		t.Fatalf("%s sets no GOMEMLIMIT", c.Name)
	}
	soft, err := parseGoMemLimit(raw)
	if err != nil {
		t.Fatalf("%s: GOMEMLIMIT=%q: %v", c.Name, raw, err)
	}
	if req := c.Resources.Requests.Memory(); req.IsZero() || soft < req.Value() {
		t.Errorf("%s: GOMEMLIMIT=%s (%d bytes) below its memory request %s", c.Name, raw, soft, req)
	}
	lim, ok := c.Resources.Limits[corev1.ResourceMemory]
	if !ok {
		t.Fatalf("%s has no memory limit for GOMEMLIMIT to stay under", c.Name)
	}
	if soft > lim.Value()*9/10 {
		t.Errorf("%s: GOMEMLIMIT=%s (%d bytes) above 90%% of its memory limit %s: the binary's resident pages and the runtime's slack need the rest", c.Name, raw, soft, lim.String())
	}
}

// parseGoMemLimit reads GOMEMLIMIT as the Go runtime does: a whole number
// of bytes with an optional unit B, KiB, MiB, GiB or TiB.
func parseGoMemLimit(s string) (int64, error) {
	units := []struct {
		suffix string
		shift  uint
	}{{"TiB", 40}, {"GiB", 30}, {"MiB", 20}, {"KiB", 10}, {"B", 0}}
	shift := uint(0)
	for _, u := range units {
		if n, ok := strings.CutSuffix(s, u.suffix); ok {
			s, shift = n, u.shift
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 || s[0] == '+' {
		return 0, fmt.Errorf("want a positive whole number of bytes with an optional unit B, KiB, MiB, GiB or TiB")
	}
	if n > math.MaxInt64>>shift {
		return 0, fmt.Errorf("out of range")
	}
	return n << shift, nil
}

func TestParseGoMemLimit(t *testing.T) {
	t.Parallel()
	good := map[string]int64{"160MiB": 160 << 20, "1GiB": 1 << 30, "4096": 4096, "12KiB": 12 << 10, "7B": 7, "2TiB": 2 << 40}
	for in, want := range good {
		if got, err := parseGoMemLimit(in); err != nil || got != want {
			t.Errorf("parseGoMemLimit(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "160M", "160Mi", "1.5GiB", "-1MiB", "+5MiB", "0", "MiB", "off", "9999999999TiB"} {
		if got, err := parseGoMemLimit(in); err == nil {
			t.Errorf("parseGoMemLimit(%q) = %d, want an error", in, got)
		}
	}
}

// listenPort is the sidecar's port, which must be a declared container port.
func listenPort(t *testing.T, c corev1.Container, cfg sidecar.Config) int32 {
	t.Helper()
	_, p, err := net.SplitHostPort(cfg.Listen)
	if err != nil {
		t.Fatal(err)
	}
	port, err := strconv.ParseInt(p, 10, 32)
	if err != nil || port == 0 {
		t.Fatalf("--listen %s: want a fixed port, which probes and the app can name", cfg.Listen)
	}
	if !slices.ContainsFunc(c.Ports, func(cp corev1.ContainerPort) bool { return cp.ContainerPort == int32(port) }) {
		t.Errorf("%s listens on %d, which is none of its container ports %+v", c.Name, port, c.Ports)
	}
	return int32(port)
}

// Each probe asks the port leasehold listens on for a path that a real
// sidecar requiring a token answers 200 without one.
func TestSidecarProbes(t *testing.T) {
	forEachExample(t, sidecarProbes)
}

func sidecarProbes(t *testing.T, dir string) {
	m := load(t, dir)
	spec := deployment(t, m).Spec.Template.Spec
	c := sidecarContainer(t, spec)
	cfg, _ := serveConfig(t, m, c)
	port := listenPort(t, c, cfg)

	handler := realSidecar(t)
	probes := []struct {
		kind  string
		probe *corev1.Probe
		paths []string
	}{
		{"startupProbe", c.StartupProbe, []string{"/healthz", "/readyz"}},
		{"livenessProbe", c.LivenessProbe, []string{"/healthz"}}, // a store outage must not restart it
		{"readinessProbe", c.ReadinessProbe, []string{"/readyz"}},
	}
	for _, p := range probes {
		if p.probe == nil || p.probe.HTTPGet == nil {
			t.Errorf("%s: no HTTP %s", c.Name, p.kind)
			continue
		}
		g := p.probe.HTTPGet
		if !slices.Contains(p.paths, g.Path) {
			t.Errorf("%s path %q, want one of %q", p.kind, g.Path, p.paths)
		}
		if g.Scheme != "" && g.Scheme != corev1.URISchemeHTTP {
			t.Errorf("%s scheme %s: leasehold serves plain HTTP", p.kind, g.Scheme)
		}
		if got := resolvePort(t, c, g.Port); got != port {
			t.Errorf("%s asks port %s (%d), but leasehold listens on %d", p.kind, g.Port.String(), got, port)
		}
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodGet, g.Path, nil)
		// The kubelet sends Host: the probe's host, else the pod's IP.
		req.Host = net.JoinHostPort(cmp.Or(g.Host, "10.244.0.7"), strconv.Itoa(int(port)))
		handler.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			t.Errorf("%s: GET %s without a token answers %d, want 200: %s", p.kind, g.Path, rec.Code, rec.Body)
		}
	}

	// serve listens only after its first migration, which may take up to
	// StartupMigrateTimeout: the startup probe must wait longer than that.
	if sp := c.StartupProbe; sp != nil {
		// 10 and 3 are Kubernetes' defaults.
		budget := time.Duration(sp.InitialDelaySeconds+cmp.Or(sp.PeriodSeconds, 10)*cmp.Or(sp.FailureThreshold, 3)) * time.Second
		if budget <= sidecar.StartupMigrateTimeout {
			t.Errorf("startupProbe gives up after %s, within the %s serve may spend migrating before it listens", budget, sidecar.StartupMigrateTimeout)
		}
	}
}

func resolvePort(t *testing.T, c corev1.Container, p intstr.IntOrString) int32 {
	t.Helper()
	if p.Type == intstr.Int {
		return p.IntVal
	}
	for _, cp := range c.Ports {
		if cp.Name == p.StrVal {
			return cp.ContainerPort
		}
	}
	t.Fatalf("%s names port %q, which it does not declare", c.Name, p.StrVal)
	return 0
}

// realSidecar is the handler of a sidecar that requires a token, on a
// migrated SQLite store.
func realSidecar(t *testing.T) http.Handler {
	t.Helper()
	return realServer(t, "probe-test-token").HTTPServer().Handler
}

// realServer is a sidecar that requires token, on a migrated SQLite store.
func realServer(t *testing.T, token string) *sidecar.Server {
	t.Helper()
	store, err := storeurl.Open(t.Context(), storeurl.MustParse("sqlite:"+filepath.Join(t.TempDir(), "leasehold.db")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	srv, err := sidecar.New(sidecar.Options{Store: store, Token: []byte(token)})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	return srv
}

// When the pod stops, the sidecar gets SIGTERM after the app has exited and
// then takes up to ShutdownTimeout to release its streams: the grace period
// must leave it that time.
func TestGracePeriodCoversSidecarShutdown(t *testing.T) {
	forEachExample(t, gracePeriodCoversSidecarShutdown)
}

func gracePeriodCoversSidecarShutdown(t *testing.T, dir string) {
	spec := deployment(t, load(t, dir)).Spec.Template.Spec
	grace := time.Duration(corev1.DefaultTerminationGracePeriodSeconds) * time.Second
	if spec.TerminationGracePeriodSeconds != nil {
		grace = time.Duration(*spec.TerminationGracePeriodSeconds) * time.Second
	}
	if grace <= sidecar.ShutdownTimeout {
		t.Errorf("terminationGracePeriodSeconds %s, want more than the sidecar's shutdown timeout %s plus the app's own shutdown", grace, sidecar.ShutdownTimeout)
	}
	c := sidecarContainer(t, spec)
	if c.Lifecycle != nil && c.Lifecycle.PreStop != nil {
		t.Errorf("%s has a preStop hook: it runs only after the app exited and delays the release of its streams", c.Name)
	}
}

// The app reaches the sidecar through the variables `leasehold run` reads:
// its address on loopback at the port the sidecar listens on, and the same
// token file from the same Secret.
func TestAppReachesSidecar(t *testing.T) {
	forEachExample(t, appReachesSidecar)
}

func appReachesSidecar(t *testing.T, dir string) {
	m := load(t, dir)
	spec := deployment(t, m).Spec.Template.Spec
	sc := sidecarContainer(t, spec)
	cfg, _ := serveConfig(t, m, sc)
	port := listenPort(t, sc, cfg)
	tokenSecret, tokenKey := mountedSecretFile(t, spec, sc, cfg.TokenFile)

	var usage bytes.Buffer
	leaserun.Main(t.Context(), []string{"-h"}, func(string) string { return "" }, strings.NewReader(""), &usage, io.Discard)
	runFlag := func(name string) bool { return strings.Contains(usage.String(), "\n  -"+name+" ") }

	if len(spec.Containers) == 0 {
		t.Fatal("no app container")
	}
	for _, c := range spec.Containers {
		env, _ := m.environment(t, c)
		for k := range env {
			name, ok := strings.CutPrefix(k, cli.EnvPrefix)
			if ok && !runFlag(strings.ToLower(strings.ReplaceAll(name, "_", "-"))) {
				t.Errorf("%s sets %s, which names no flag of leasehold run", c.Name, k)
			}
		}
		if _, ok := env[cli.EnvName("store")]; ok {
			t.Errorf("%s sets %s: leasehold run would refuse it beside %s, and the app goes through the sidecar", c.Name, cli.EnvName("store"), cli.EnvName("addr"))
		}
		addr, err := url.Parse(env[cli.EnvName("addr")])
		if err != nil || addr.Scheme != "http" {
			t.Errorf("%s: %s=%q, want http://127.0.0.1:%d", c.Name, cli.EnvName("addr"), env[cli.EnvName("addr")], port)
		} else if ip := net.ParseIP(addr.Hostname()); ip == nil || !ip.IsLoopback() || addr.Port() != strconv.Itoa(int(port)) {
			t.Errorf("%s: %s=%s, want the sidecar on loopback port %d (the pod's containers share its network)", c.Name, cli.EnvName("addr"), addr, port)
		}
		file := env[cli.EnvName("token-file")]
		if file == "" {
			t.Errorf("%s: no %s", c.Name, cli.EnvName("token-file"))
			continue
		}
		if s, k := mountedSecretFile(t, spec, c, file); s != tokenSecret || k != tokenKey {
			t.Errorf("%s: %s is Secret %s key %s, but the sidecar's token is Secret %s key %s", c.Name, file, s, k, tokenSecret, tokenKey)
		}
	}
}
