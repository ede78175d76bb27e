// The videos page (galley serve --videos-ui): a client of the videos API on the same origin.
// Every request goes through fetch, so that an API key travels as `Authorization: Bearer`;
// previews and videos are fetched as blobs and shown from object URLs. The video being watched is
// in the URL's fragment (#video_...), so a reload or a later visit comes back to it.

const KEY_STORE = "galley-videos-api-key";
const PAGE_SIZE = 10;
const FINAL = new Set(["completed", "failed", "cancelled"]);

const $ = (id) => document.getElementById(id);
let apiKey = sessionStorage.getItem(KEY_STORE) ?? "";
/** The video shown in the "Video" section: its id, and what to stop when another is shown. */
let watching = { id: "", stop: new AbortController(), urls: [] };
let lastId = null;

class ApiError extends Error {
  constructor(status, body) {
    super(body?.error?.message ?? `HTTP ${status}`);
    this.status = status;
    this.code = body?.error?.code ?? "";
  }
}

async function api(method, path, body, signal) {
  const headers = {};
  if (apiKey) headers.authorization = `Bearer ${apiKey}`;
  if (body !== undefined) headers["content-type"] = "application/json";
  const response = await fetch(path, {
    method,
    headers,
    signal,
    ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
  });
  if (!response.ok) {
    const text = await response.text();
    let parsed;
    try {
      parsed = JSON.parse(text);
    } catch {
      parsed = { error: { message: text || `HTTP ${response.status}` } };
    }
    throw new ApiError(response.status, parsed);
  }
  return response;
}

function say(text) {
  $("message").textContent = text;
}

function fail(error) {
  if (error?.name === "AbortError") return;
  if (error instanceof ApiError && error.status === 401) {
    $("key-box").open = true;
    say(`This server needs an API key: ${error.message}`);
    return;
  }
  say(error instanceof Error ? error.message : String(error));
}

/** A blob of a video's file as an object URL, freed when another video is shown. */
async function objectUrl(id, variant, signal) {
  const query = variant === "video" ? "" : `?variant=${variant}`;
  const response = await api("GET", `/v1/videos/${id}/content${query}`, undefined, signal);
  const blob = await response.blob();
  const url = URL.createObjectURL(blob);
  watching.urls.push(url);
  return { url, type: blob.type };
}

function describe(video) {
  switch (video.status) {
    case "queued":
      return `Queued: ${video.queue_position ?? 0} ${video.queue_position === 1 ? "video" : "videos"} ahead`;
    case "in_progress":
      return `Running: ${video.progress}%`;
    case "completed":
      return "Completed";
    case "failed":
      return `Failed: ${video.error?.message ?? "unknown error"}`;
    default:
      return "Cancelled";
  }
}

function showStatus(video) {
  $("status").textContent = describe(video);
  const cell = document.querySelector(`tr[data-id="${watching.id}"] .status`);
  if (cell) cell.textContent = describe(video);
  $("progress").value = video.progress;
  $("cancel").hidden = FINAL.has(video.status);
}

async function showPreview(id, signal) {
  const { url } = await objectUrl(id, "preview", signal);
  $("preview").src = url;
  $("preview-box").hidden = false;
}

async function showResult(video, signal) {
  const { url, type } = await objectUrl(video.id, "video", signal);
  const result = $("result");
  result.replaceChildren();
  let media;
  if (type === "video/mp4") {
    media = document.createElement("video");
    media.controls = true;
    media.loop = true;
    media.muted = true;
    media.autoplay = true;
    media.playsInline = true;
  } else {
    media = document.createElement("img");
    media.alt = `The video: ${video.prompt}`;
  }
  media.id = "video";
  media.src = url;
  const caption = document.createElement("figcaption");
  caption.textContent = `${video.size}, ${video.frames} frames`;
  result.append(media, caption);
  result.hidden = false;
  const link = $("download");
  link.href = url;
  link.download = `${video.id}${type === "video/mp4" ? ".mp4" : ".gif"}`;
  link.hidden = false;
}

/** Read the video's event stream until its final status; opened again (after a pause) if it drops. */
async function follow(id, signal) {
  for (let attempt = 0; !signal.aborted; attempt++) {
    try {
      const response = await api("GET", `/v1/videos/${id}/events`, undefined, signal);
      const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
      let text = "";
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        text += value.replace(/\r\n?/g, "\n");
        for (let at = text.indexOf("\n\n"); at >= 0; at = text.indexOf("\n\n")) {
          const block = text.slice(0, at);
          text = text.slice(at + 2);
          const name = /^event: ?(.*)$/m.exec(block)?.[1];
          const data = /^data: ?(.*)$/m.exec(block)?.[1];
          if (!name || data === undefined) continue;
          attempt = 0;
          const event = JSON.parse(data);
          if (name === "video") {
            showStatus(event);
            if (FINAL.has(event.status)) return event;
          } else if (name === "progress") {
            showStatus({ status: "in_progress", progress: event.progress });
          } else if (name === "preview") {
            showStatus({ status: "in_progress", progress: event.progress });
            // A preview may be gone when it is fetched (the video cancelled or expired meanwhile):
            // the stream says what comes next. None is fetched once Cancel was clicked: the
            // previews still queued in the stream are of a video that is going.
            if (!(watching.id === id && watching.cancelled)) {
              await showPreview(id, signal).catch((error) => {
                if (signal.aborted) throw error;
              });
            }
          }
        }
      }
    } catch (error) {
      if (signal.aborted || (error instanceof ApiError && error.status < 500)) throw error;
    }
    // The stream ended before the final status (a server restarting): try again, more slowly each time.
    $("status").textContent = "Reconnecting…";
    await new Promise((resolve) => setTimeout(resolve, Math.min(500 * 2 ** attempt, 8000)));
  }
  throw new DOMException("stopped", "AbortError");
}

/** Show one video in the "Video" section: live while it runs, then its result. */
async function watch(id) {
  watching.stop.abort();
  for (const url of watching.urls) URL.revokeObjectURL(url);
  const stop = new AbortController();
  watching = { id, stop, urls: [] };
  if (location.hash !== `#${id}`) history.replaceState(null, "", `#${id}`);
  $("current").hidden = false;
  $("preview-box").hidden = true;
  $("result").hidden = true;
  $("download").hidden = true;
  $("status").textContent = "Loading…";
  try {
    const video = await (await api("GET", `/v1/videos/${id}`, undefined, stop.signal)).json();
    $("current-prompt").textContent = video.prompt;
    showStatus(video);
    const final = FINAL.has(video.status) ? video : await follow(id, stop.signal);
    if (final.status === "completed") await showResult(final, stop.signal);
    else if (final.status === "cancelled") $("preview-box").hidden = true;
    refresh();
  } catch (error) {
    if (error instanceof ApiError && error.status === 404) {
      $("current").hidden = true;
      history.replaceState(null, "", location.pathname);
    }
    fail(error);
  }
}

function row(video) {
  const tr = document.createElement("tr");
  tr.dataset.id = video.id;
  const prompt = document.createElement("td");
  prompt.textContent = video.prompt.length > 80 ? `${video.prompt.slice(0, 80)}…` : video.prompt;
  const status = document.createElement("td");
  status.className = "status";
  status.textContent = describe(video);
  const created = document.createElement("td");
  created.textContent = new Date(video.created_at * 1000).toLocaleString();
  const actions = document.createElement("td");
  const open = document.createElement("button");
  open.type = "button";
  open.textContent = "Open";
  open.setAttribute("aria-label", `Open: ${video.prompt}`);
  open.addEventListener("click", () => watch(video.id));
  const remove = document.createElement("button");
  remove.type = "button";
  const running = !FINAL.has(video.status);
  remove.textContent = running ? "Cancel" : "Delete";
  remove.setAttribute("aria-label", `${remove.textContent}: ${video.prompt}`);
  remove.addEventListener("click", () => cancel(video.id, running));
  actions.append(open, remove);
  tr.append(prompt, status, created, actions);
  return tr;
}

/** The list: its first page again (`more`: the next page, appended). */
async function refresh(more = false) {
  try {
    const query = new URLSearchParams({ limit: String(PAGE_SIZE) });
    if (more && lastId) query.set("after", lastId);
    const page = await (await api("GET", `/v1/videos?${query}`)).json();
    const rows = page.data.map(row);
    if (more) $("videos").append(...rows);
    else $("videos").replaceChildren(...rows);
    lastId = page.last_id ?? lastId;
    $("more").hidden = !page.has_more;
  } catch (error) {
    fail(error);
  }
}

async function cancel(id, running) {
  if (!running && !confirm("Delete this video and its files?")) return;
  if (running && watching.id === id) watching.cancelled = true;
  try {
    const answer = await (await api("DELETE", `/v1/videos/${id}`)).json();
    if (running && watching.id === id && answer.status) showStatus(answer);
    if (!running && watching.id === id) {
      watching.stop.abort();
      $("current").hidden = true;
      history.replaceState(null, "", location.pathname);
    }
    await refresh();
  } catch (error) {
    fail(error);
  }
}

async function create(event) {
  event.preventDefault();
  say("");
  const form = new FormData(event.target);
  const body = { model: form.get("model"), prompt: form.get("prompt"), priority: form.get("priority") };
  if (form.get("size")) body.size = form.get("size");
  for (const name of ["frames", "steps"]) if (form.get(name)) body[name] = Number(form.get(name));
  $("generate").disabled = true;
  try {
    const video = await (await api("POST", "/v1/videos", body)).json();
    await refresh();
    watch(video.id);
  } catch (error) {
    fail(error);
  } finally {
    $("generate").disabled = false;
  }
}

$("create-form").addEventListener("submit", create);
$("key-form").addEventListener("submit", (event) => {
  event.preventDefault();
  apiKey = $("api-key").value.trim();
  if (apiKey) sessionStorage.setItem(KEY_STORE, apiKey);
  else sessionStorage.removeItem(KEY_STORE);
  $("key-box").open = false;
  say("");
  refresh();
  if (watching.id) watch(watching.id);
});
$("cancel").addEventListener("click", () => cancel(watching.id, true));
$("refresh").addEventListener("click", () => refresh());
$("more").addEventListener("click", () => refresh(true));
addEventListener("hashchange", () => {
  const id = location.hash.slice(1);
  if (/^video_[0-9a-f]{32}$/.test(id) && id !== watching.id) watch(id);
});

refresh();
const start = location.hash.slice(1);
if (/^video_[0-9a-f]{32}$/.test(start)) watch(start);
