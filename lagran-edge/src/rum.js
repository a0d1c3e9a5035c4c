// Lagran real-user measurement: times this browser's fetches from the edge nodes the
// control plane names for it, and posts the times to the edge that served this
// script. No dependencies; runs once per page, after the page has loaded.
(function () {
  "use strict";
  var PREFIX = "/.well-known/lagran/";
  var ROUNDS = 3; // the first fetch of a node warms DNS, TCP and TLS and is not sent
  var root = document.documentElement;
  if (!window.fetch || !window.performance || root.dataset.lagranRum) {
    return;
  }
  root.dataset.lagranRum = "running";
  var script = document.currentScript;
  var edge = script && script.src ? new URL(script.src).origin : location.origin;

  function done(state) {
    root.dataset.lagranRum = state;
  }

  // One fetch's time in ms: request to first byte when the node allows timing
  // (Timing-Allow-Origin), else the whole fetch as the browser measured it.
  function timed(url) {
    var started = performance.now();
    return fetch(url, { cache: "no-store", mode: "cors", credentials: "omit" }).then(function (resp) {
      return resp.arrayBuffer().then(function () {
        var entries = performance.getEntriesByName(url);
        var e = entries[entries.length - 1];
        if (e && e.responseStart > 0 && e.requestStart > 0) {
          return e.responseStart - e.requestStart;
        }
        return e ? e.duration : performance.now() - started;
      });
    });
  }

  function timeNode(candidate) {
    var base = location.protocol + "//" + candidate.hostname + PREFIX + "ping?r=";
    var samples = [];
    var chain = Promise.resolve();
    for (var i = 0; i < ROUNDS; i++) {
      chain = chain.then(function (round) {
        return timed(base + Math.random().toString(36).slice(2)).then(function (ms) {
          if (round > 0 && ms > 0) {
            samples.push(Math.round(ms * 1000) / 1000);
          }
        });
      }.bind(null, i));
    }
    return chain.then(
      function () { return samples.length ? { node: candidate.node, samples_ms: samples } : null; },
      function () { return null; }
    );
  }

  function run() {
    fetch(edge + PREFIX + "candidates", { cache: "no-store", credentials: "omit" })
      .then(function (resp) {
        if (!resp.ok) {
          throw new Error("candidates: " + resp.status);
        }
        return resp.json();
      })
      .then(function (answer) {
        var nodes = (answer.candidates || []).slice(0, 3);
        var timings = [];
        var chain = Promise.resolve();
        nodes.forEach(function (c) {
          chain = chain.then(function () {
            return timeNode(c).then(function (t) { if (t) { timings.push(t); } });
          });
        });
        return chain.then(function () { return timings; });
      })
      .then(function (timings) {
        if (!timings.length) {
          return done("nothing-timed");
        }
        // text/plain keeps the post a simple request: no CORS preflight.
        return fetch(edge + PREFIX + "beacon", {
          method: "POST",
          body: JSON.stringify({ timings: timings }),
          headers: { "content-type": "text/plain" },
          credentials: "omit",
          keepalive: true
        }).then(function (resp) { done(resp.ok ? "sent" : "refused:" + resp.status); });
      })
      .catch(function (e) { done("failed:" + e.message); });
  }

  if (document.readyState === "complete") {
    setTimeout(run, 0);
  } else {
    window.addEventListener("load", function () { setTimeout(run, 0); });
  }
})();
