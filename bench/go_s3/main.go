// A fast S3 endpoint for the loader benchmark (bench/loader_limit.py), standard library only: the
// objects of a directory served as S3 serves them, so that the server is not what limits a copy.
//
// Path-style requests: every first-level folder of -root is a bucket, every file below it an
// object keyed by its path. Served: ListObjects (v1, `marker`) and ListObjectsV2
// (`continuation-token`, `start-after`), each with `prefix`, `delimiter` and `max-keys` (1000 at
// most, as S3); GET and HEAD of an object with `Range: bytes=...` (206 and Content-Range, as S3);
// HEAD of a bucket; GetBucketLocation. ETags are the objects' MD5, as S3 gives for an object put
// in one part, read from -etags (a `key<TAB>md5` line per object, written with the data), so a
// client that checks hashes checks real ones. No request is authenticated.
//
// To model an object store rather than a disk: -first-byte delays every answer's first byte, and
// -rate-mib caps each connection's bytes per second (HTTP/1.1 serves a connection's requests one
// after another, so pacing each answer paces its connection).
package main

import (
	"bufio"
	"encoding/base64"
	"encoding/xml"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

type object struct {
	key      string
	path     string
	size     int64
	etag     string
	modified time.Time
}

type bucket struct {
	keys    []string // sorted
	objects map[string]*object
}

var (
	buckets   = map[string]*bucket{}
	firstByte = flag.Duration("first-byte", 0, "delay before every answer's first byte")
	rateMiB   = flag.Float64("rate-mib", 0, "bytes per second each connection gets, in MiB (0: no cap)")
)

func load(root, etags string) error {
	sums := map[string]string{}
	if etags != "" {
		file, err := os.Open(etags)
		if err != nil {
			return err
		}
		defer file.Close()
		lines := bufio.NewScanner(file)
		for lines.Scan() {
			if key, sum, ok := strings.Cut(lines.Text(), "\t"); ok {
				sums[key] = sum
			}
		}
	}
	entries, err := os.ReadDir(root)
	if err != nil {
		return err
	}
	for _, entry := range entries {
		if !entry.IsDir() {
			continue
		}
		name := entry.Name()
		b := &bucket{objects: map[string]*object{}}
		base := filepath.Join(root, name)
		err := filepath.Walk(base, func(path string, info os.FileInfo, err error) error {
			if err != nil || info.IsDir() {
				return err
			}
			rel, _ := filepath.Rel(base, path)
			key := filepath.ToSlash(rel)
			b.objects[key] = &object{key, path, info.Size(), sums[name+"/"+key], info.ModTime()}
			b.keys = append(b.keys, key)
			return nil
		})
		if err != nil {
			return err
		}
		sort.Strings(b.keys)
		buckets[name] = b
	}
	return nil
}

type content struct {
	Key          string `xml:"Key"`
	LastModified string `xml:"LastModified"`
	ETag         string `xml:"ETag"`
	Size         int64  `xml:"Size"`
	StorageClass string `xml:"StorageClass"`
}

type commonPrefix struct {
	Prefix string `xml:"Prefix"`
}

type listing struct {
	XMLName               xml.Name       `xml:"ListBucketResult"`
	Xmlns                 string         `xml:"xmlns,attr"`
	Name                  string         `xml:"Name"`
	Prefix                string         `xml:"Prefix"`
	Delimiter             string         `xml:"Delimiter,omitempty"`
	MaxKeys               int            `xml:"MaxKeys"`
	IsTruncated           bool           `xml:"IsTruncated"`
	Marker                *string        `xml:"Marker,omitempty"`
	NextMarker            string         `xml:"NextMarker,omitempty"`
	KeyCount              *int           `xml:"KeyCount,omitempty"`
	ContinuationToken     string         `xml:"ContinuationToken,omitempty"`
	NextContinuationToken string         `xml:"NextContinuationToken,omitempty"`
	StartAfter            string         `xml:"StartAfter,omitempty"`
	Contents              []content      `xml:"Contents"`
	CommonPrefixes        []commonPrefix `xml:"CommonPrefixes"`
}

// list answers ListObjects (v1) and ListObjectsV2: the keys after `after` under `prefix`, those
// with `delimiter` past the prefix rolled up into common prefixes, `max` entries at most.
func list(name string, b *bucket, query map[string][]string, w http.ResponseWriter) {
	get := func(k string) string {
		if v := query[k]; len(v) > 0 {
			return v[0]
		}
		return ""
	}
	v2 := get("list-type") == "2"
	prefix, delimiter := get("prefix"), get("delimiter")
	max := 1000
	if m, err := strconv.Atoi(get("max-keys")); err == nil && m >= 0 && m < max {
		max = m
	}
	after := get("marker")
	if v2 {
		after = get("start-after")
		if token := get("continuation-token"); token != "" {
			raw, err := base64.StdEncoding.DecodeString(token)
			if err != nil {
				http.Error(w, "bad continuation-token", http.StatusBadRequest)
				return
			}
			after = string(raw)
		}
	}
	out := listing{Xmlns: "http://s3.amazonaws.com/doc/2006-03-01/", Name: name, Prefix: prefix,
		Delimiter: delimiter, MaxKeys: max}
	i := sort.SearchStrings(b.keys, prefix)
	if after > prefix {
		i = sort.SearchStrings(b.keys, after)
		if i < len(b.keys) && b.keys[i] == after {
			i++
		}
	}
	last := ""
	for ; i < len(b.keys) && strings.HasPrefix(b.keys[i], prefix); i++ {
		if len(out.Contents)+len(out.CommonPrefixes) == max {
			out.IsTruncated = true
			break
		}
		key := b.keys[i]
		if delimiter != "" {
			if at := strings.Index(key[len(prefix):], delimiter); at >= 0 {
				rolled := key[:len(prefix)+at+len(delimiter)]
				out.CommonPrefixes = append(out.CommonPrefixes, commonPrefix{rolled})
				last = rolled
				// Past every key under it: the first key that does not start with it.
				i += sort.Search(len(b.keys)-i, func(j int) bool {
					return !strings.HasPrefix(b.keys[i+j], rolled)
				}) - 1
				continue
			}
		}
		o := b.objects[key]
		out.Contents = append(out.Contents, content{key,
			o.modified.UTC().Format("2006-01-02T15:04:05.000Z"), `"` + o.etag + `"`, o.size, "STANDARD"})
		last = key
	}
	if v2 {
		count := len(out.Contents) + len(out.CommonPrefixes)
		out.KeyCount = &count
		out.ContinuationToken = get("continuation-token")
		out.StartAfter = get("start-after")
		if out.IsTruncated {
			out.NextContinuationToken = base64.StdEncoding.EncodeToString([]byte(last))
		}
	} else {
		marker := get("marker")
		out.Marker = &marker
		if out.IsTruncated {
			out.NextMarker = last
		}
	}
	w.Header().Set("Content-Type", "application/xml")
	io.WriteString(w, xml.Header)
	xml.NewEncoder(w).Encode(out)
}

// span reads a Range header as S3 does: one range, `a-b`, `a-` or `-n`.
func span(header string, size int64) (int64, int64, bool) {
	if !strings.HasPrefix(header, "bytes=") {
		return 0, 0, false
	}
	spec := strings.TrimPrefix(header, "bytes=")
	if strings.Contains(spec, ",") {
		return 0, 0, false
	}
	first, last, _ := strings.Cut(spec, "-")
	if first == "" {
		n, err := strconv.ParseInt(last, 10, 64)
		if err != nil || n <= 0 {
			return 0, 0, false
		}
		if n > size {
			n = size
		}
		return size - n, size - 1, true
	}
	start, err := strconv.ParseInt(first, 10, 64)
	if err != nil || start >= size {
		return 0, 0, false
	}
	end := size - 1
	if last != "" {
		if end, err = strconv.ParseInt(last, 10, 64); err != nil || end < start {
			return 0, 0, false
		}
		if end > size-1 {
			end = size - 1
		}
	}
	return start, end, true
}

// paced copies `n` bytes, no faster than -rate-mib.
func paced(w io.Writer, r io.Reader, n int64) {
	if *rateMiB <= 0 {
		io.CopyN(w, r, n)
		return
	}
	rate := *rateMiB * 1024 * 1024
	started := time.Now()
	buf := make([]byte, 256*1024)
	var sent int64
	for sent < n {
		chunk := int64(len(buf))
		if n-sent < chunk {
			chunk = n - sent
		}
		got, err := io.ReadFull(r, buf[:chunk])
		if got > 0 {
			if _, werr := w.Write(buf[:got]); werr != nil {
				return
			}
			sent += int64(got)
		}
		if err != nil {
			return
		}
		if due := time.Duration(float64(sent) / rate * float64(time.Second)); due > time.Since(started) {
			time.Sleep(due - time.Since(started))
		}
	}
}

func serveObject(o *object, w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("ETag", `"`+o.etag+`"`)
	h.Set("Last-Modified", o.modified.UTC().Format(http.TimeFormat))
	h.Set("Accept-Ranges", "bytes")
	h.Set("Content-Type", "application/octet-stream")
	start, end, status := int64(0), o.size-1, http.StatusOK
	if header := r.Header.Get("Range"); header != "" && o.size > 0 {
		var ok bool
		if start, end, ok = span(header, o.size); !ok {
			h.Set("Content-Range", fmt.Sprintf("bytes */%d", o.size))
			http.Error(w, "InvalidRange", http.StatusRequestedRangeNotSatisfiable)
			return
		}
		h.Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", start, end, o.size))
		status = http.StatusPartialContent
	}
	length := end - start + 1
	if o.size == 0 {
		length = 0
	}
	h.Set("Content-Length", strconv.FormatInt(length, 10))
	if r.Method == http.MethodHead {
		w.WriteHeader(status)
		return
	}
	file, err := os.Open(o.path)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	defer file.Close()
	if _, err := file.Seek(start, io.SeekStart); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.WriteHeader(status)
	paced(w, file, length)
}

func notFound(w http.ResponseWriter, code, resource string) {
	w.Header().Set("Content-Type", "application/xml")
	w.WriteHeader(http.StatusNotFound)
	fmt.Fprintf(w, "%s<Error><Code>%s</Code><Resource>%s</Resource></Error>", xml.Header, code, resource)
}

func handle(w http.ResponseWriter, r *http.Request) {
	if *firstByte > 0 {
		time.Sleep(*firstByte)
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		http.Error(w, "read-only", http.StatusMethodNotAllowed)
		return
	}
	name, key, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	b := buckets[name]
	if b == nil {
		notFound(w, "NoSuchBucket", name)
		return
	}
	if key != "" {
		if o := b.objects[key]; o != nil {
			serveObject(o, w, r)
		} else {
			notFound(w, "NoSuchKey", key)
		}
		return
	}
	query := r.URL.Query()
	switch {
	case r.Method == http.MethodHead:
		w.WriteHeader(http.StatusOK)
	case query.Has("location"):
		w.Header().Set("Content-Type", "application/xml")
		io.WriteString(w, xml.Header+`<LocationConstraint xmlns="http://s3.amazonaws.com/doc/2006-03-01/"></LocationConstraint>`)
	default:
		list(name, b, query, w)
	}
}

func main() {
	addr := flag.String("addr", "127.0.0.1:9000", "listen address")
	root := flag.String("root", ".", "the folder whose first-level folders are the buckets")
	etags := flag.String("etags", "", "a file of `bucket/key<TAB>md5` lines")
	flag.Parse()
	if err := load(*root, *etags); err != nil {
		log.Fatal(err)
	}
	server := &http.Server{Addr: *addr, Handler: http.HandlerFunc(handle),
		ErrorLog: log.New(io.Discard, "", 0)}
	log.Fatal(server.ListenAndServe())
}
