// A load client for the pod-create benchmark under load: -clients goroutines, each with a
// connection of its own (its own transport, HTTP/2 by ALPN as client-go speaks), POST the same
// pod (generateName) to the API server back to back for -seconds, and time each create. Standard
// library only, so that the client costs the shared machine as little as it can: what is timed
// is the API server and its admission, not the load.
//
// It prints one JSON object: creates answered 201, failures (with the first one's status and
// the start of its body), the seconds it ran, and latency percentiles in milliseconds.
package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"sort"
	"sync"
	"time"
)

type result struct {
	Created      int                `json:"created"`
	Failed       int                `json:"failed"`
	FirstFailure string             `json:"first_failure,omitempty"`
	Seconds      float64            `json:"seconds"`
	PerSecond    float64            `json:"per_second"`
	LatencyMs    map[string]float64 `json:"latency_ms"`
}

func client(ca *x509.CertPool) *http.Client {
	transport := &http.Transport{
		TLSClientConfig:     &tls.Config{RootCAs: ca},
		ForceAttemptHTTP2:   true,
		MaxIdleConnsPerHost: 1,
	}
	return &http.Client{Transport: transport, Timeout: 60 * time.Second}
}

func percentile(sorted []time.Duration, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	index := int(q * float64(len(sorted)-1))
	return float64(sorted[index].Microseconds()) / 1000.0
}

func main() {
	url := flag.String("url", "", "the pods collection, e.g. https://127.0.0.1:6443/api/v1/namespaces/bench/pods")
	token := flag.String("token", "", "bearer token")
	caFile := flag.String("ca", "", "the API server's CA certificate")
	bodyFile := flag.String("body", "", "the pod to create, as JSON")
	clients := flag.Int("clients", 16, "clients at once, a connection each")
	seconds := flag.Float64("seconds", 60, "how long to create")
	flag.Parse()

	caPEM, err := os.ReadFile(*caFile)
	if err != nil {
		log.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		log.Fatal("no certificate in ", *caFile)
	}
	body, err := os.ReadFile(*bodyFile)
	if err != nil {
		log.Fatal(err)
	}

	var mu sync.Mutex
	var latencies []time.Duration
	var failed int
	var firstFailure string
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(time.Duration(*seconds * float64(time.Second)))
	for i := 0; i < *clients; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := client(pool)
			mine := make([]time.Duration, 0, 4096)
			for time.Now().Before(deadline) {
				request, _ := http.NewRequest("POST", *url, bytes.NewReader(body))
				request.Header.Set("Authorization", "Bearer "+*token)
				request.Header.Set("Content-Type", "application/json")
				sent := time.Now()
				answer, err := c.Do(request)
				var text []byte
				if err == nil {
					text, _ = io.ReadAll(answer.Body)
					answer.Body.Close()
				}
				took := time.Since(sent)
				if err == nil && answer.StatusCode == http.StatusCreated {
					mine = append(mine, took)
					continue
				}
				mu.Lock()
				failed++
				if firstFailure == "" {
					if err != nil {
						firstFailure = err.Error()
					} else {
						if len(text) > 300 {
							text = text[:300]
						}
						firstFailure = fmt.Sprintf("%d %s", answer.StatusCode, text)
					}
				}
				mu.Unlock()
			}
			mu.Lock()
			latencies = append(latencies, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	elapsed := time.Since(start).Seconds()
	sort.Slice(latencies, func(a, b int) bool { return latencies[a] < latencies[b] })
	out := result{
		Created:      len(latencies),
		Failed:       failed,
		FirstFailure: firstFailure,
		Seconds:      elapsed,
		PerSecond:    float64(len(latencies)) / elapsed,
		LatencyMs: map[string]float64{
			"p50":  percentile(latencies, 0.50),
			"p90":  percentile(latencies, 0.90),
			"p99":  percentile(latencies, 0.99),
			"p999": percentile(latencies, 0.999),
			"max":  percentile(latencies, 1.0),
		},
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		log.Fatal(err)
	}
}
