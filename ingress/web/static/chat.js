// The web chat page: live updates over server-sent events, and the user's clicks and
// prompts as POSTs. The server draws every fragment (escaped there); this script only
// puts fragments where they belong and never builds HTML from text itself.
"use strict";
(function () {
  const chat = document.getElementById("chat");
  if (!chat) return;
  // The thread's path, under the chat's own (the server's: its cookie goes only there).
  const base = chat.dataset.base;
  const messages = document.getElementById("messages");
  const status = document.getElementById("status");
  const notice = document.getElementById("notice");
  const prompt = document.getElementById("prompt");

  function say(text) {
    notice.textContent = text;
    notice.hidden = !text;
  }

  async function post(path, body) {
    say("");
    try {
      // A FormData (files) goes as multipart, its type and length set by the browser.
      const form = body instanceof FormData;
      const answer = await fetch(base + path, {
        method: "POST",
        headers: form ? {} : { "content-type": "application/json" },
        body: form ? body : JSON.stringify(body),
        credentials: "same-origin",
      });
      if (!answer.ok) {
        let text = answer.statusText;
        try { text = (await answer.json()).error || text; } catch (e) { /* not JSON */ }
        say(text);
        return false;
      }
      return true;
    } catch (e) {
      say("Spindle cannot be reached: " + e);
      return false;
    }
  }

  function fragment(html) {
    const template = document.createElement("template");
    template.innerHTML = html;
    return template.content.firstElementChild;
  }

  function nearBottom() {
    return window.innerHeight + window.scrollY >= document.body.scrollHeight - 80;
  }

  function put(data) {
    const follow = nearBottom();
    const element = fragment(data.html);
    const old = document.getElementById("m-" + data.id);
    const empty = document.getElementById("no-messages");
    if (empty) empty.remove();
    if (old) old.replaceWith(element); else messages.append(element);
    if (follow) window.scrollTo(0, document.body.scrollHeight);
  }

  const events = new EventSource(base + "/events?after=" + chat.dataset.seq);
  events.addEventListener("put", (e) => put(JSON.parse(e.data)));
  events.addEventListener("delete", (e) => {
    const old = document.getElementById("m-" + JSON.parse(e.data).id);
    if (old) old.remove();
  });
  events.addEventListener("status", (e) => {
    // Keep what is being typed into an answer box while the panel is drawn again.
    const typed = {};
    status.querySelectorAll("input.answer-text").forEach((i) => { typed[i.dataset.request] = i.value; });
    status.innerHTML = JSON.parse(e.data).html;
    status.querySelectorAll("input.answer-text").forEach((i) => {
      if (typed[i.dataset.request]) i.value = typed[i.dataset.request];
    });
    const data = JSON.parse(e.data);
    chat.dataset.phase = data.phase;
    if (data.title) {
      // The agent's session title: the heading and the tab follow it (text, never HTML).
      document.getElementById("thread-title").textContent = data.title;
      document.title = data.title + " · Spindle";
    }
  });
  events.addEventListener("reload", () => { events.close(); window.location.reload(); });

  document.addEventListener("click", (e) => {
    const button = e.target.closest("button[data-action]");
    if (!button) return;
    const action = button.dataset.action;
    const body = { action: action };
    if (button.dataset.answer !== undefined) body.answer = button.dataset.answer;
    if (button.dataset.multi) {
      const box = button.closest(".multi");
      body.answer = Array.from(box.querySelectorAll("input:checked")).map((i) => i.value).join(", ");
    }
    if (button.dataset.fromInput) {
      body.answer = button.parentElement.querySelector("input.answer-text").value;
    }
    button.disabled = true;
    post("/button", body).finally(() => { button.disabled = false; });
  });

  const files = document.getElementById("files");

  async function send(queued) {
    const text = prompt.value;
    if (files.files.length) {
      const form = new FormData();
      form.append("text", text);
      form.append("queue", queued ? "1" : "0");
      for (const file of files.files) form.append("file", file);
      if (await post("/attach", form)) { prompt.value = ""; files.value = ""; }
    } else {
      if (!text.trim()) return;
      if (await post("/say", { text: text, queue: queued })) prompt.value = "";
    }
    prompt.focus();
  }
  document.getElementById("composer").addEventListener("submit", (e) => { e.preventDefault(); send(false); });
  document.getElementById("queue-send").addEventListener("click", () => send(true));
  prompt.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) { e.preventDefault(); send(false); }
  });
  prompt.focus();
})();
