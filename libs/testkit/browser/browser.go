// Package browser starts the headless Chromium the web console's tests
// drive with chromedp, and fails a test on any JavaScript error of the page.
// It is the one way the tests start a browser, so that every page test runs
// it with the same options and the same error checks.
package browser

import (
	"context"
	"os/exec"
	"strings"
	"sync"
	"testing"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/loom-ml/loom/libs/testkit/need"
)

// Start starts a headless Chromium (Debian's chromium; the test skips where
// it is missing, and fails under LOOM_TEST_REQUIRE_TOOLS=1) with a
// 1440×1000 window, bound to ctx and ended at the test's end, and returns
// the context of its first tab. Every JavaScript exception and
// console.error of the pages it shows fails the test at its end
// (CollectJSErrors). The returned context has no timeout: a timeout on the
// browser's first run would end the browser; give each later action one.
func Start(t *testing.T, ctx context.Context) context.Context {
	t.Helper()
	need.Tools(t, "apt-get install chromium", "chromium")
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatal(err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium), chromedp.NoSandbox,
		chromedp.WindowSize(1440, 1000), chromedp.Flag("disable-gpu", true))
	actx, acancel := chromedp.NewExecAllocator(ctx, opts...)
	t.Cleanup(acancel)
	bctx, bcancel := chromedp.NewContext(actx)
	t.Cleanup(bcancel)
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	CollectJSErrors(t, bctx)
	return bctx
}

// CollectJSErrors records every uncaught JavaScript exception and
// console.error of the page (the console's main.js reports a CSP violation
// as one), and fails the test with them at its end: a page that throws is
// broken even when its text looks right.
func CollectJSErrors(t *testing.T, ctx context.Context) {
	t.Helper()
	var mu sync.Mutex
	var errs []string
	if err := chromedp.Listen(ctx, func(ev any) {
		var msg string
		switch e := ev.(type) {
		case *runtime.EventExceptionThrown:
			msg = "exception: " + e.ExceptionDetails.Text
			if e.ExceptionDetails.Exception != nil {
				msg += " " + e.ExceptionDetails.Exception.Description
			}
		case *runtime.EventConsoleAPICalled:
			if e.Type != runtime.ConsoleAPICalledTypeError {
				return
			}
			msg = "console.error:"
			for _, a := range e.Args {
				msg += " " + string(a.Value) + a.Description
			}
		default:
			return
		}
		mu.Lock()
		errs = append(errs, msg)
		mu.Unlock()
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		if len(errs) > 0 {
			t.Errorf("the page's JavaScript reported %d errors:\n%s", len(errs), strings.Join(errs, "\n"))
		}
	})
}
