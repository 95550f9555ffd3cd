#!/usr/bin/env python3
"""Writes the held-out conversations of the extractive summarizer's tests (heldout-*.json).

They were written for ctxguard, independently of the other sample conversations (those of
tests/support/gen_conversations.py and any outside set): other domains, other fact shapes
(times, ports, paths, decisions with reasons, names, ids with letters, URLs, instance types,
percentages, flags), facts inside longer sentences, in English, German and Japanese, among
filler turns, repeated boilerplate and noisy tool output.
Each file is an OpenAI-format conversation with "needles": [{fact, where}] (fact verbatim in a
message of that role), read by bench/bench_summary.c and tests/unit/test_summary_heldout.c.
Deterministic (fixed seed): run it again and the files are the same.
"""
import json
import os
import random

HERE = os.path.dirname(os.path.abspath(__file__))

TOOLS = [
    {"type": "function", "function": {"name": n, "description": d,
                                      "parameters": {"type": "object", "properties": {}}}}
    for n, d in [("shell", "run a command"), ("open_file", "read a file"),
                 ("patch", "apply a patch"), ("query_logs", "search the logs")]
]


def noise_output(rng):
    kind = rng.randrange(4)
    if kind == 0:
        return "\n".join(
            f"-rw-r--r-- 1 app app {rng.randrange(100, 99999):>6} Mar {rng.randrange(1, 28):>2} "
            f"{rng.randrange(0, 23):02d}:{rng.randrange(0, 59):02d} "
            f"{rng.choice(['main', 'util', 'db', 'http', 'cache'])}_{i}.{rng.choice(['py', 'go', 'ts'])}"
            for i in range(rng.randrange(8, 40)))
    if kind == 1:
        return "\n".join(
            f"2025-03-{rng.randrange(1, 28):02d}T{rng.randrange(0, 23):02d}:"
            f"{rng.randrange(0, 59):02d}:{rng.randrange(0, 59):02d}Z INFO "
            f"request handled path=/api/v2/items/{rng.randrange(1000, 9999)} "
            f"status=200 dur_ms={rng.randrange(1, 400)}"
            for _ in range(rng.randrange(10, 60)))
    if kind == 2:
        return json.dumps({"items": [{"id": rng.randrange(10**6), "name": f"item-{i}",
                                      "price": rng.randrange(100, 10000) / 100}
                                     for i in range(rng.randrange(3, 20))]}, indent=2)
    return "\n".join(
        f"def handler_{i}(request):\n    return render(request, 'page_{i}.html', "
        f"{{'limit': {rng.randrange(10, 100)}}})\n" for i in range(rng.randrange(3, 12)))


def build(name, lang, system, opening, fillers_user, fillers_assistant, facts, tool_facts,
          total, seed):
    """facts: [(role, sentence containing the fact, fact)]; tool_facts: [(line, fact)]."""
    rng = random.Random(seed)
    msgs = [{"role": "system", "content": system}, {"role": "user", "content": opening}]
    needles = []
    items = [("said", f) for f in facts] + [("tool", f) for f in tool_facts]
    rng.shuffle(items)
    slots = sorted(rng.sample(range(2, total - 4), len(items)))
    call = 0
    turn = 2
    while turn < total or items:
        item = None
        if items and slots[0] <= turn:
            slots.pop(0)
            item = items.pop(0)
        if item and item[0] == "said":
            role, sentence, fact = item[1]
            if role == "assistant" and msgs[-1]["role"] == "assistant":
                msgs.append({"role": "user", "content": rng.choice(fillers_user)})
            if role == "user" and msgs[-1]["role"] == "user":
                msgs.append({"role": "assistant", "content": rng.choice(fillers_assistant)})
            msgs.append({"role": role, "content": sentence})
            needles.append({"fact": fact, "where": role})
        elif item or (msgs[-1]["role"] in ("user", "tool") and rng.random() < 0.6):
            if msgs[-1]["role"] == "assistant":
                msgs.append({"role": "user", "content": rng.choice(fillers_user)})
            call += 1
            cid = f"call_{seed}_{call}"
            tool = rng.choice(TOOLS)["function"]["name"]
            args = {"path": f"src/{rng.choice(['api', 'core', 'jobs'])}/mod_{call}.py"} \
                if tool in ("open_file", "patch") else {"cmd": "make test"}
            msgs.append({"role": "assistant", "content": rng.choice(fillers_assistant),
                         "tool_calls": [{"id": cid, "type": "function", "function": {
                             "name": tool, "arguments": json.dumps(args)}}]})
            out = noise_output(rng)
            if item and item[0] == "tool":
                line, fact = item[1]
                lines = out.split("\n")
                lines.insert(rng.randrange(len(lines) + 1), line)
                out = "\n".join(lines)
                needles.append({"fact": fact, "where": "tool"})
            msgs.append({"role": "tool", "tool_call_id": cid, "content": out})
        elif msgs[-1]["role"] == "user":
            msgs.append({"role": "assistant", "content": rng.choice(fillers_assistant)})
        else:
            msgs.append({"role": "user", "content": rng.choice(fillers_user)})
        turn = len(msgs)
    with open(os.path.join(HERE, f"heldout-{name}.json"), "w", encoding="utf-8") as f:
        json.dump({"id": f"heldout-{name}", "model": "gpt-4o", "language": lang,
                   "messages": msgs, "tools": TOOLS, "needles": needles}, f,
                  ensure_ascii=False, indent=1)


EN_USER = ["Thanks, keep going.", "Looks good so far.", "Can you check the logs again?",
           "OK, what else did you see?", "Please continue with the next module.",
           "Hmm, that is odd. Dig a bit deeper."]
EN_ASSISTANT = ["I'll look into it.", "Checking the next file now.", "Let me run the tests.",
                "Let me look at the handler code.", "Running the linter on the package."]

build("en-web", "en",
      "You are a careful backend engineer. Work in the shop repository.",
      "We are moving the shop backend from the old VM to Kubernetes and the checkout keeps "
      "failing afterwards. Help me find out why and fix it.",
      EN_USER, EN_ASSISTANT,
      [("user", "Also keep in mind that port 8443 is reserved for the admin API, so nothing "
                "else may bind it.", "port 8443 is reserved for the admin API"),
       ("assistant", "I checked the cron table: the nightly backup runs at 02:30 UTC, which "
                     "overlaps the failing window.", "the nightly backup runs at 02:30 UTC"),
       ("user", "We'll go with Redis 7.2 instead of Memcached because we need streams.",
        "We'll go with Redis 7.2 instead of Memcached because we need streams"),
       ("assistant", "The new index lives in migrations/0042_add_orders_index.sql and is "
                     "applied on start.", "migrations/0042_add_orders_index.sql"),
       ("user", "Please set worker_concurrency to 12 in settings/celery.py before the next "
                "deploy.", "set worker_concurrency to 12 in settings/celery.py"),
       ("user", "Maria Lopez approved the schema change yesterday.",
        "Maria Lopez approved the schema change"),
       ("assistant", "Found it: the upload path writes to the S3 bucket "
                     "acme-prod-logs-eu-west-1 with the wrong role.",
        "acme-prod-logs-eu-west-1"),
       ("assistant", "After the fix p99 latency dropped from 840 ms to 95 ms on the checkout "
                     "route.", "p99 latency dropped from 840 ms to 95 ms"),
       ("user", "The JWT expiry must stay at 15 minutes, security insists on it.",
        "The JWT expiry must stay at 15 minutes"),
       ("user", "The customer id 7731-AZ was the one that reported the bug.",
        "customer id 7731-AZ")],
      [("ERROR connection refused to orders-db.internal:5432 (pool exhausted)",
        "connection refused to orders-db.internal:5432"),
       ("# max_connections = 200 is the limit agreed with the DBA team",
        "max_connections = 200")],
      70, 11)

build("en-long", "en",
      "You are an SRE assistant for the payments platform.",
      "Our payment API started to return 502s under load last night. Find the cause, keep "
      "notes of everything we settle on, and fix what you can.",
      EN_USER, EN_ASSISTANT,
      [("user", "For context: the rate limit is 300 requests per minute per key.",
        "the rate limit is 300 requests per minute per key"),
       ("user", "We agreed to drop support for Python 3.8 in this release.",
        "drop support for Python 3.8"),
       ("assistant", "The staging cluster is k8s-stg-euw1, I will test there first.",
        "k8s-stg-euw1"),
       ("assistant", "git bisect says commit 4f9c2e1 introduced the regression in the "
                     "retry path.", "commit 4f9c2e1 introduced the regression"),
       ("user", "Only use --no-verify-ssl in CI, never in production.",
        "Only use --no-verify-ssl in CI"),
       ("assistant", "Note that the CSV export is capped at 50,000 rows per request.",
        "the CSV export is capped at 50,000 rows"),
       ("user", "Our deploy window is Tuesday 14:00-16:00 CET.",
        "deploy window is Tuesday 14:00-16:00 CET"),
       ("assistant", "The billing webhook URL is https://hooks.example.com/billing/v3 and it "
                     "answered 200.", "https://hooks.example.com/billing/v3"),
       ("user", "GPU nodes use the g5.2xlarge instance type, do not change that.",
        "g5.2xlarge"),
       ("user", "The feature flag new_pricing_ui stays off until March 3.",
        "new_pricing_ui stays off until March 3"),
       ("assistant", "The Grafana dashboard id is 88123 if you want to watch it live.",
        "dashboard id is 88123"),
       ("user", "Remember our error budget for Q3 is 0.1 % of requests.",
        "error budget for Q3 is 0.1 %"),
       ("assistant", "I changed the retry backoff: it starts at 200 ms and caps at 5 s now.",
        "starts at 200 ms and caps at 5 s"),
       ("assistant", "The cache TTL was lowered to 90 seconds to limit stale reads.",
        "cache TTL was lowered to 90 seconds"),
       ("user", "Keep the legacy endpoint /api/v1/orders alive until the mobile app 5.4 "
                "ships.", "Keep the legacy endpoint /api/v1/orders alive")],
      [("WARNING upstream timed out after 30s host=pay-gw-3 route=/v2/charge",
        "upstream timed out after 30s host=pay-gw-3")],
      220, 23)

DE_USER = ["Danke, mach weiter.", "Sieht gut aus.", "Kannst du die Logs noch einmal prüfen?",
           "Was hast du sonst noch gesehen?", "Bitte mach mit dem nächsten Modul weiter."]
DE_ASSISTANT = ["Ich schaue mir das an.", "Ich prüfe jetzt die nächste Datei.",
                "Ich lasse die Tests laufen.", "Ich sehe mir den Handler an."]

build("de-infra", "de",
      "Du bist ein sorgfältiger Infrastruktur-Ingenieur.",
      "Unser Build-Server ist seit dem Update extrem langsam und die Deployments schlagen "
      "ab und zu fehl. Bitte finde die Ursache und behebe sie.",
      DE_USER, DE_ASSISTANT,
      [("user", "Wichtig: Der Cronjob läuft jeden Tag um 03:15 UTC und blockiert den Runner.",
        "Der Cronjob läuft jeden Tag um 03:15 UTC"),
       ("assistant", "Die Konfiguration liegt unter /etc/nginx/conf.d/upstream.conf, dort "
                     "fehlt das Keepalive.", "/etc/nginx/conf.d/upstream.conf"),
       ("user", "Wir haben uns für PostgreSQL 16 entschieden, MySQL fällt weg.",
        "Wir haben uns für PostgreSQL 16 entschieden"),
       ("assistant", "Das Speicherlimit beträgt 512 MiB pro Pod, das reicht für den Build "
                     "nicht.", "Das Speicherlimit beträgt 512 MiB pro Pod"),
       ("user", "Der Schlüssel heißt feature.checkout_v2 und muss aktiv bleiben.",
        "feature.checkout_v2"),
       ("assistant", "Der Build dauert jetzt 7 Minuten statt 19 Minuten.",
        "Der Build dauert jetzt 7 Minuten statt 19 Minuten"),
       ("user", "Das Ticket INC-20931 beschreibt den Ausfall von gestern.", "INC-20931"),
       ("user", "Frau Becker ist für das Deployment zuständig.",
        "Frau Becker ist für das Deployment zuständig")],
      [("FEHLER: Verbindung zu registry.intern:5000 abgelehnt", "registry.intern:5000")],
      60, 37)

JA_USER = ["ありがとうございます。続けてください。", "良さそうです。", "もう一度ログを確認してもらえますか？",
           "他に何か見つかりましたか？", "次のモジュールに進んでください。"]
JA_ASSISTANT = ["確認します。", "次のファイルを調べます。", "テストを実行します。", "ハンドラのコードを見てみます。"]

build("ja-batch", "ja",
      "あなたは慎重なバックエンドエンジニアです。",
      "夜間バッチが途中で止まってしまいます。原因を調べて修正してください。",
      JA_USER, JA_ASSISTANT,
      [("assistant", "バッチサイズは 512 に設定しました。", "バッチサイズは 512 に設定しました"),
       ("user", "ログは /var/log/app/worker.log に出力されます。", "/var/log/app/worker.log"),
       ("user", "リリースは v2.8.0 で行うことに決めました。", "リリースは v2.8.0 で行うことに決めました"),
       ("assistant", "タイムアウトを 45 秒に延ばしました。", "タイムアウトを 45 秒に延ばしました"),
       ("user", "環境変数 APP_ENV は staging です。", "環境変数 APP_ENV は staging です"),
       ("user", "担当者は田中さんです。", "担当者は田中さんです"),
       ("user", "エラーコード E1042 が出ています。", "エラーコード E1042 が出ています")],
      [("ERROR: job nightly_import failed after 3 retries (exit 137)",
        "job nightly_import failed after 3 retries")],
      56, 41)
