// A Go peer for the admission benchmark: the mutating pod webhook's core logic in Go's net/http,
// standard library only. It decodes the AdmissionReview, walks the pod's init and app
// containers, and answers with a JSON Patch: NVIDIA_VISIBLE_DEVICES=none for every container
// without a GPU resource, and, for a container on a time-sliced GPU (a `.shared` name, or one
// -shared names because the cluster's nodes share it under its plain name), the three
// memory-share env entries and the three summary annotations the service writes (values from
// -fraction, -replicas and -limit-mib: the share is not computed from nodes here). It is the
// cost of a compiled webhook doing the same shape of work, to compare the Python service's
// latency with, not a second implementation of the policies.
package main

import (
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"flag"
	"io"
	"log"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
)

// What the benchmark reads at /connections: the connections accepted (each a TLS handshake)
// and the reviews answered by protocol (HTTP/2.0 when the client negotiated h2 by ALPN).
var (
	statsMu    sync.Mutex
	accepted   int
	byProtocol = map[string]int{}
)

type review struct {
	APIVersion string          `json:"apiVersion"`
	Kind       string          `json:"kind"`
	Request    json.RawMessage `json:"request"`
}

type request struct {
	UID    string                 `json:"uid"`
	Object map[string]interface{} `json:"object"`
}

type op struct {
	Op    string      `json:"op"`
	Path  string      `json:"path"`
	Value interface{} `json:"value"`
}

var (
	fraction = flag.String("fraction", "0.237", "GPU memory fraction written for shared GPUs")
	replicas = flag.String("replicas", "4", "replicas written for shared GPUs")
	limitMiB = flag.String("limit-mib", "9707", "GPU memory limit written for shared GPUs")
	sharing  = flag.String("sharing", "mps,time-slicing", "sharing strategies written")
	plain    = flag.String("shared", "", "plain resource names the nodes share, comma-separated")
)

func isShared(name string) bool {
	if strings.HasSuffix(name, ".shared") {
		return true
	}
	for _, shared := range strings.Split(*plain, ",") {
		if name == shared {
			return true
		}
	}
	return false
}

func isGPU(name string) bool {
	return name == "nvidia.com/gpu" || name == "nvidia.com/gpu.shared" ||
		strings.HasPrefix(name, "nvidia.com/mig-")
}

func resourceNames(container map[string]interface{}) []string {
	var names []string
	resources, _ := container["resources"].(map[string]interface{})
	for _, field := range []string{"limits", "requests"} {
		values, _ := resources[field].(map[string]interface{})
		for name := range values {
			names = append(names, name)
		}
	}
	return names
}

func envOps(path string, container map[string]interface{}, entries []map[string]string) []op {
	if _, has := container["env"].([]interface{}); !has {
		return []op{{"add", path + "/env", entries}}
	}
	ops := make([]op, 0, len(entries))
	for _, entry := range entries {
		ops = append(ops, op{"add", path + "/env/-", entry})
	}
	return ops
}

func mutate(pod map[string]interface{}) []op {
	spec, _ := pod["spec"].(map[string]interface{})
	var ops []op
	var shared []string
	for _, list := range []string{"initContainers", "containers"} {
		containers, _ := spec[list].([]interface{})
		for i, item := range containers {
			container, _ := item.(map[string]interface{})
			path := "/spec/" + list + "/" + strconv.Itoa(i)
			gpu, share := false, false
			for _, name := range resourceNames(container) {
				if isGPU(name) {
					gpu = true
					share = share || isShared(name)
				}
			}
			switch {
			case !gpu:
				ops = append(ops, envOps(path, container, []map[string]string{
					{"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"}})...)
			case share:
				ops = append(ops, envOps(path, container, []map[string]string{
					{"name": "GPU_MEMORY_FRACTION", "value": *fraction},
					// The service names it GPU_SHARED_REPLICAS: the benchmark tells them apart by it.
					{"name": "GPU_REPLICAS", "value": *replicas},
					{"name": "GPU_MEMORY_LIMIT_MIB", "value": *limitMiB}})...)
				name, _ := container["name"].(string)
				shared = append(shared, name)
			}
		}
	}
	if len(shared) > 0 {
		metadata, _ := pod["metadata"].(map[string]interface{})
		if _, has := metadata["annotations"].(map[string]interface{}); !has {
			ops = append(ops, op{"add", "/metadata/annotations", map[string]string{}})
		}
		summary := func(value string) string {
			parts := make([]string, len(shared))
			for i, name := range shared {
				parts[i] = name + "=" + value
			}
			return strings.Join(parts, ",")
		}
		ops = append(ops,
			op{"add", "/metadata/annotations/gpu-admission.io~1gpu-memory-fraction", summary(*fraction)},
			op{"add", "/metadata/annotations/gpu-admission.io~1gpu-replicas", summary(*replicas)},
			op{"add", "/metadata/annotations/gpu-admission.io~1gpu-sharing", *sharing})
	}
	return ops
}

func handle(w http.ResponseWriter, r *http.Request) {
	var rev review
	if err := json.NewDecoder(r.Body).Decode(&rev); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var req request
	if err := json.Unmarshal(rev.Request, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	response := map[string]interface{}{"uid": req.UID, "allowed": true}
	// As a validating webhook (bench.pod_create registers it as a pair): decoded, allowed.
	if strings.HasSuffix(r.URL.Path, "/validate") {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]interface{}{
			"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response})
		return
	}
	if ops := mutate(req.Object); len(ops) > 0 {
		patch, _ := json.Marshal(ops)
		response["patchType"] = "JSONPatch"
		response["patch"] = base64.StdEncoding.EncodeToString(patch)
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]interface{}{
		"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response})
}

func route(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/connections" {
		statsMu.Lock()
		defer statsMu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]interface{}{"accepted": accepted, "requests": byProtocol})
		return
	}
	statsMu.Lock()
	byProtocol[r.Proto]++
	statsMu.Unlock()
	handle(w, r)
}

func main() {
	addr := flag.String("addr", "127.0.0.1:8443", "listen address")
	cert := flag.String("cert", "tls.crt", "certificate file")
	key := flag.String("key", "tls.key", "key file")
	// kube-apiserver speaks HTTP/1.1 to a webhook reached through clientConfig.service or a
	// URL that is not loopback (k8s.io/apiserver/pkg/util/webhook/client.go), as in a cluster;
	// only a loopback URL lets it negotiate h2. So HTTP/1.1 unless asked.
	http2 := flag.Bool("http2", false, "offer HTTP/2 by ALPN as well as HTTP/1.1")
	flag.Parse()
	// The benchmark's readiness probes close connections mid-handshake: not worth a log line.
	server := &http.Server{Addr: *addr, Handler: http.HandlerFunc(route),
		ErrorLog: log.New(io.Discard, "", 0),
		ConnState: func(_ net.Conn, state http.ConnState) {
			if state == http.StateNew {
				statsMu.Lock()
				accepted++
				statsMu.Unlock()
			}
		}}
	if !*http2 {
		// A non-nil empty map: net/http neither offers h2 by ALPN nor serves it.
		server.TLSNextProto = map[string]func(*http.Server, *tls.Conn, http.Handler){}
	}
	log.Fatal(server.ListenAndServeTLS(*cert, *key))
}
