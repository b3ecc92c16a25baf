// The Go stop-the-world case's server (runtime_live's Go test).
//
// An HTTP/1.1 keep-alive server on Debian's Go that answers in microseconds,
// beside one goroutine (locked to its own thread) that every PERIOD_MS
// computes for SPIN_MS in a loop without calls, as a checksum or a parser
// of a large buffer would. Run with GODEBUG=asyncpreemptoff=1, such a loop
// cannot be preempted: a garbage collection started meanwhile (here 2 ms
// into the loop, by runtime.GC() on another goroutine) stops every other
// goroutine at once, then waits for the loop to end before its
// stop-the-world phase can finish, so every request that arrives meanwhile
// waits for the world to restart. (Go's own pause statistics count that
// wait: MemStats.PauseNs.) The server times each such collection itself on
// CLOCK_MONOTONIC, from just before runtime.GC() to the loop's first call
// after its end (which runs only once the world has restarted); on SIGTERM
// those intervals, and Go's own pause statistics, go to FACTS as JSON: the
// outside truth of the case.
//
//	GOMAXPROCS=2 GODEBUG=asyncpreemptoff=1 go_stw_server PORT PERIOD_MS SPIN_MS FACTS
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

var response = []byte("HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Type: text/plain\r\n\r\nok\n")

// monotonic is CLOCK_MONOTONIC in ns, the clock the probes use (Go's own
// monotonic readings count from the process's start).
func monotonic() uint64 {
	var ts syscall.Timespec
	syscall.Syscall(syscall.SYS_CLOCK_GETTIME, 1, uintptr(unsafe.Pointer(&ts)), 0)
	return uint64(ts.Sec)*1e9 + uint64(ts.Nsec)
}

// spin runs n rounds of arithmetic with no call inside the loop: without
// asynchronous preemption nothing can stop it before it returns.
func spin(n int) uint64 {
	x := uint64(88172645463325252)
	for i := 0; i < n; i++ {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
	}
	return x
}

var (
	mu       sync.Mutex
	stops    [][2]uint64
	served   int64
	checksum uint64
)

// rounds finds how many rounds of spin take about ms milliseconds.
func rounds(ms float64) int {
	n := 1 << 20
	for {
		t := time.Now()
		checksum ^= spin(n)
		took := time.Since(t)
		if took > 20*time.Millisecond {
			return int(float64(n) * ms / (float64(took) / 1e6))
		}
		n *= 2
	}
}

func stopper(period, spinMs float64) {
	runtime.LockOSThread()
	n := rounds(spinMs)
	for {
		time.Sleep(time.Duration(period * float64(time.Millisecond)))
		started := make(chan uint64, 1)
		go func() {
			time.Sleep(2 * time.Millisecond)
			started <- monotonic()
			runtime.GC()
		}()
		checksum ^= spin(n)
		end := monotonic()
		mu.Lock()
		stops = append(stops, [2]uint64{<-started, end})
		mu.Unlock()
	}
}

func serve(c net.Conn) {
	defer c.Close()
	r := bufio.NewReader(c)
	var head []byte
	for {
		line, err := r.ReadSlice('\n')
		if err != nil {
			return
		}
		head = append(head, line...)
		if bytes.HasSuffix(head, []byte("\r\n\r\n")) {
			head = head[:0]
			atomic.AddInt64(&served, 1)
			if _, err := c.Write(response); err != nil {
				return
			}
		}
	}
}

func finish(path string) {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	mu.Lock()
	defer mu.Unlock()
	n := int(ms.NumGC)
	if n > len(ms.PauseNs) {
		n = len(ms.PauseNs)
	}
	pauses := make([]uint64, 0, n)
	for i := int(ms.NumGC) - n; i < int(ms.NumGC); i++ {
		pauses = append(pauses, ms.PauseNs[i%len(ms.PauseNs)])
	}
	out, _ := json.Marshal(map[string]interface{}{
		"served":    atomic.LoadInt64(&served),
		"stops":     stops,
		"gc_pauses": pauses,
		"num_gc":    ms.NumGC,
	})
	os.WriteFile(path, out, 0o644)
	os.Exit(0)
}

func main() {
	if len(os.Args) != 5 {
		os.Stderr.WriteString("usage: go_stw_server PORT PERIOD_MS SPIN_MS FACTS\n")
		os.Exit(2)
	}
	period, _ := strconv.ParseFloat(os.Args[2], 64)
	spinMs, _ := strconv.ParseFloat(os.Args[3], 64)
	facts := os.Args[4]
	l, err := net.Listen("tcp", "127.0.0.1:"+os.Args[1])
	if err != nil {
		os.Stderr.WriteString(err.Error() + "\n")
		os.Exit(1)
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-sig
		finish(facts)
	}()
	go stopper(period, spinMs)
	for {
		c, err := l.Accept()
		if err != nil {
			continue
		}
		go serve(c)
	}
}
