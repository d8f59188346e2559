// The Resources tab's charts (uPlot). The page names its source and where to read it in data-
// attributes of #resources: "metrics" is an event stream of samples from metrics.k8s.io, kept here
// while the page is open; "prometheus" is the job's whole lifetime as JSON, read once.
"use strict";
(() => {
  const root = document.getElementById("resources");
  if (!root || typeof uPlot === "undefined") return;
  const status = document.getElementById("resources-status");
  const colours = ["#0b5cad", "#b3261e", "#1a7f37", "#8a5a00", "#6e40c9", "#0a7d8c", "#c2410c", "#4d5660"];
  const charts = {};

  function format(value, unit) {
    if (value === null || value === undefined) return "";
    if (unit === "bytes") {
      const units = ["B", "KiB", "MiB", "GiB", "TiB"];
      let index = 0;
      while (Math.abs(value) >= 1024 && index < units.length - 1) { value /= 1024; index += 1; }
      return value.toFixed(value < 10 && index > 0 ? 1 : 0) + " " + units[index];
    }
    if (unit === "cores") return value < 1 ? Math.round(value * 1000) + "m" : value.toFixed(2);
    return value.toFixed(0) + unit;
  }

  // An axis's tick labels, with as many decimals as the step between ticks needs: ticks 0.2 MiB
  // apart must not all read "68 MiB".
  function tickLabels(ticks, unit) {
    if (unit !== "bytes" || ticks.length < 2) return ticks.map((tick) => format(tick, unit));
    const largest = Math.max(...ticks.map(Math.abs));
    const power = largest > 0 ? Math.min(4, Math.floor(Math.log(largest) / Math.log(1024))) : 0;
    const size = 1024 ** power;
    const step = Math.abs(ticks[1] - ticks[0]) / size;
    const decimals = Math.max(0, Math.min(3, -Math.floor(Math.log10(step))));
    const name = ["B", "KiB", "MiB", "GiB", "TiB"][power];
    return ticks.map((tick) => (tick / size).toFixed(decimals) + " " + name);
  }

  // The request and limit lines of each chart, from the job's spec (series.pod_bounds).
  const bounds = JSON.parse(root.dataset.bounds || "{}");
  const pad = (n) => String(n).padStart(2, "0");

  function clock(seconds, withSeconds) {
    const moment = new Date(seconds * 1000);
    const minutes = pad(moment.getHours()) + ":" + pad(moment.getMinutes());
    return withSeconds ? minutes + ":" + pad(moment.getSeconds()) : minutes;
  }

  function zone() {
    const offset = -new Date().getTimezoneOffset();
    const sign = offset < 0 ? "-" : "+";
    return "UTC" + sign + pad(Math.floor(Math.abs(offset) / 60)) + ":" + pad(Math.abs(offset) % 60);
  }

  function latest(name, times, byPod, pods, unit) {
    const element = document.getElementById("latest-" + name);
    if (!element || !times.length) return;
    const said = pods.map((pod) => {
      const values = byPod[pod];
      for (let index = values.length - 1; index >= 0; index -= 1) {
        if (values[index] !== null && values[index] !== undefined) return pod + ": " + format(values[index], unit);
      }
      return pod + ": no sample";
    });
    element.textContent = "Latest (" + clock(times[times.length - 1], true) + "): " + said.join(" · ");
  }

  function draw(name, times, byPod) {
    const element = document.getElementById("chart-" + name);
    if (!element) return;
    const pods = Object.keys(byPod).sort();
    const lines = bounds[name] || [];
    const data = [times, ...pods.map((pod) => byPod[pod]), ...lines.map((line) => times.map(() => line.value))];
    element.dataset.pods = pods.join(" ");
    element.dataset.points = String(times.length);
    element.dataset.bounds = lines.map((line) => line.label).join(", ");
    const unit = element.dataset.unit;
    latest(name, times, byPod, pods, unit);
    const known = charts[name];
    if (known && known.pods.join(" ") === pods.join(" ")) {
      known.plot.setData(data);
      return;
    }
    if (known) known.plot.destroy();
    const value = (plot, number) => format(number, unit);
    const options = {
      width: Math.max(320, element.clientWidth || 900),
      height: 220,
      scales: {
        // From the first sample, not before; a minute wide at least.
        x: {
          time: true,
          range: (plot) => {
            const seconds = plot.data[0];
            return [seconds[0], Math.max(seconds[seconds.length - 1], seconds[0] + 60)];
          },
        },
      },
      series: [
        { label: "Time", value: (plot, seconds) => (seconds === null ? "" : clock(seconds, true)) },
        ...pods.map((pod, index) => ({ label: pod, stroke: colours[index % colours.length], width: 2, value })),
        ...lines.map((line) => ({
          label: line.label, stroke: "#4d5660", width: 1, dash: line.kind === "limit" ? [2, 4] : [8, 6], value,
        })),
      ],
      axes: [
        {
          label: "Local time (" + zone() + ")",
          space: 90,
          values: (plot, ticks) => {
            const span = ticks.length > 1 ? ticks[ticks.length - 1] - ticks[0] : 0;
            return ticks.map((tick) => clock(tick, span < 300));
          },
        },
        { size: 80, values: (plot, ticks) => tickLabels(ticks, unit) },
      ],
    };
    charts[name] = { plot: new uPlot(options, data, element), pods };
  }

  function say(text, problem) {
    status.textContent = text;
    status.className = problem ? "problem" : "hint";
  }

  function follow(url) {
    const history = { cpu: { times: [], byPod: {} }, memory: { times: [], byPod: {} } };
    const source = new EventSource(url);
    source.addEventListener("sample", (event) => {
      const sample = JSON.parse(event.data);
      for (const name of Object.keys(history)) {
        const chart = history[name];
        if (chart.times.length && sample.time <= chart.times[chart.times.length - 1]) continue;
        chart.times.push(sample.time);
        const values = sample[name] || {};
        for (const pod of Object.keys(values)) {
          if (!chart.byPod[pod]) chart.byPod[pod] = new Array(chart.times.length - 1).fill(null);
        }
        for (const pod of Object.keys(chart.byPod)) {
          chart.byPod[pod].push(pod in values ? values[pod] : null);
        }
        draw(name, chart.times, chart.byPod);
      }
      say(Object.keys(sample.cpu || {}).length ? "" : "No pod of this job reports metrics yet.", false);
    });
    source.addEventListener("finished", () => {
      source.close();
      say("This job has finished: its pods are gone and their metrics are no longer collected.", false);
    });
    source.addEventListener("unavailable", () => {
      source.close();
      say("This cluster serves no metrics.k8s.io (no metrics-server), so there is nothing to draw.", true);
    });
    source.addEventListener("refused", (event) => {
      source.close();
      const detail = JSON.parse(event.data);
      say("The cluster refused to show you this job's metrics (" + detail.status + "): " + detail.message, true);
    });
  }

  async function readOnce(url) {
    say("Reading the job's series from Prometheus…", false);
    const response = await fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } });
    const answer = await response.json();
    if (!response.ok) {
      say("Prometheus' series could not be read (" + response.status + "): " + answer.error, true);
      return;
    }
    for (const [name, chart] of Object.entries(answer.charts)) {
      if (name === "gpu" && !Object.keys(chart.series).length) continue;
      if (name === "gpu") document.getElementById("gpu").hidden = false;
      draw(name, chart.times, chart.series);
    }
    const empty = !Object.keys(answer.charts.cpu.series).length;
    say(empty ? "Prometheus has no series of this job's pods." : "", false);
  }

  if (!root.dataset.url) {
    // A finished job without Prometheus: the page says why there is nothing to draw.
  } else if (root.dataset.source === "prometheus") {
    readOnce(root.dataset.url).catch((error) => say("Prometheus' series could not be read: " + error, true));
  } else {
    follow(root.dataset.url);
  }
})();
