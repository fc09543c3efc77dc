// Every visible string of the page, in one table (zh). index.html carries
// only keys (data-i18n, data-i18n-placeholder, data-i18n-title, data-i18n-aria);
// app.js and graph.js ask t(key, vars). {name} in a string is replaced by vars.name.
export const zh = {
  "page.title": "SoulMem 记忆对话",
  "app.name": "SoulMem",
  "app.tagline": "会记事的角色对话",

  // header / connection state
  "status.idle": "未连接",
  "status.connecting": "连接中…",
  "status.joining": "正在进入 {character}…",
  "status.joined": "已连接：{character}",
  "status.loading": "{character} 正在加载记忆，稍后自动重试…",
  "status.not_running": "{character} 未在运行，稍后自动重试…",
  "status.auth": "令牌无效",
  "status.offline": "连接中断，正在重连…",
  "status.error": "连接出错",
  "switcher.label": "角色",
  "switcher.none": "（尚未添加角色）",

  // tabs
  "tab.chat": "对话",
  "tab.why": "为什么想起这些",
  "tab.graph": "记忆图谱",
  "tab.characters": "角色",
  "tab.operator": "管理",
  "tabs.aria": "面板",

  // chat
  "chat.placeholder": "说点什么… 例如：你还记得和小白吃麻辣烫那次吗？",
  "chat.send": "发送",
  "chat.empty": "还没有对话。说一句话开始吧。",
  "chat.restored": "已恢复之前的对话（{count} 条）",
  "chat.summary": "前情摘要",
  "chat.why_button": "为什么想起这些（{count}）",
  "chat.thinking": "正在回忆…",
  "chat.typing": "正在回复…",
  "chat.reply_interrupted": "（回复中断）",
  "chat.send_failed": "没有发出，消息未保存：{message}",
  "chat.timeout": "服务器没有及时回应，消息可能未保存。",
  "chat.consolidated": "记忆已整理",
  "chat.you": "我",
  "chat.history_failed": "无法恢复之前的对话：{message}",
  "chat.no_reply_feature": "服务器还不支持流式回复（chat），已改用一次性回复（turn）。",

  // LLM errors
  "llm.not_configured.title": "角色还没有连上语言模型，所以这次无法回复。",
  "llm.not_configured.body": "你的话和想起的记忆已经保存。要让角色开口，请在启动服务前设置环境变量 SOUL_MEM_LLM_BASE_URL（一个兼容 OpenAI 接口的地址，例如 http://127.0.0.1:8080/v1），或者用 scripts/run.sh --llm 启动，它会在本机准备并运行一个小模型。",
  "llm.failed.title": "语言模型这次没有回复。",
  "llm.failed.body": "你的话和想起的记忆已经保存。请检查模型服务是否在运行（SOUL_MEM_LLM_BASE_URL），然后再说一句试试。",

  // why panel
  "why.title": "为什么想起这些",
  "why.empty": "发一句话后，这里会列出角色为这一轮想起的记忆，以及是怎么想起来的。",
  "why.legend": "分数条按本轮最高分归一化：最长的一条就是本轮最高分，其余按比例缩短；条旁的数字是原始分数。",
  "why.turn": "第 {turn} 轮：“{text}”",
  "why.counts": "{memories} 条记忆 · {actions} 条行为倾向",
  "why.channels": "找到它的方式",
  "why.stage": "阶段",
  "why.score": "分数",
  "why.path": "联想路径",
  "why.seeds": "联想起点",
  "why.core": "核心记忆",
  "why.core_list": "始终带上的核心记忆（{count}）",
  "why.context": "发给模型的上下文",
  "why.summary": "摘要",
  "why.like": "有用",
  "why.dislike": "没用",
  "why.feedback_ok": "已记录反馈",
  "why.feedback_failed": "反馈失败：{message}",
  "why.embedding.model": "向量：模型",
  "why.embedding.hash": "向量：哈希（未加载模型）",
  "why.embedding.partial": "向量：模型仍在建立索引，部分结果来自关键词",
  "why.embedding.none": "",
  "why.forgetting": "遗忘状态：{band}",
  "why.show_graph": "在图谱中查看",
  "why.actions": "行为倾向",

  // channel and stage labels
  "channel.dense": "语义相似",
  "channel.tag": "标签匹配",
  "channel.lexical": "关键词",
  "channel.association": "联想",
  "stage.Similarity": "相似检索",
  "stage.Ppr": "联想扩散",
  "stage.Both": "相似 + 联想",
  "stage.Action": "行为倾向",
  "stage.Core": "核心",

  // graph
  "graph.title": "记忆图谱",
  "graph.hint": "本轮想起的记忆（彩色、较大）和与它们直接相连的记忆（灰色）。点一个节点查看内容。",
  "graph.empty": "还没有可显示的记忆。先说一句话。",
  "graph.loading": "正在加载图谱…",
  "graph.failed": "无法加载图谱：{message}",
  "graph.fallback": "服务器还不支持图谱查询，这里只显示本轮的联想路径。",
  "graph.turn": "第 {turn} 轮的记忆",
  "graph.pick": "点一个节点查看它的内容。",
  "graph.node_kind": "类型：{kind}",
  "kind.semantic": "知识",
  "kind.specific_situation": "具体经历",
  "kind.abstract_situation": "抽象情境",
  "kind.procedure": "习惯",
  "graph.recalled": "本轮想起（颜色表示阶段）：",
  "graph.neighbour": "相邻记忆",
  "graph.core": "核心记忆",
  "graph.no_library": "图谱组件没有加载（/assets/vendor/cytoscape.min.js）。",

  // characters / tokens
  "chars.title": "我的角色",
  "chars.hint": "每个令牌只能打开一个角色。令牌保存在这个浏览器里（localStorage），不会发给别的网站。",
  "chars.add": "添加角色",
  "chars.character": "角色 ID",
  "chars.token": "令牌",
  "chars.connect": "连接",
  "chars.switch": "切换",
  "chars.current": "当前",
  "chars.remove": "移除",
  "chars.empty": "还没有保存的角色。",
  "chars.need_both": "请填写角色 ID 和令牌。",

  // auth problems
  "auth.title": "无法打开这个角色",
  "auth.missing": "还没有填写令牌。请输入角色 ID 和它的令牌（演示角色 demo 在开发环境下的令牌是启动时打印的那一个，通常是 dev-token）。",
  "auth.unauthorized": "令牌“{masked}”无效，或已被管理员吊销。请向管理员要一个新令牌（mix soul.token {character}），填在下面。",
  "auth.forbidden": "这个令牌不能打开角色“{character}”：一个令牌只对应一个角色。请确认角色 ID，或换成这个角色自己的令牌。",
  "auth.origin": "服务器拒绝了这个页面的来源（Origin）。请从服务器本机地址打开页面，或让管理员把这个地址加入 SOUL_MEM_ALLOWED_ORIGINS。",
  "auth.revoked": "这个角色的令牌刚刚被吊销，对话已结束。请输入新的令牌。",
  "auth.unreachable": "连不上服务器，正在重试。请确认服务已经启动。",
  "auth.retry": "用这个令牌连接",

  // operator view
  "op.title": "管理：令牌",
  "op.hint": "使用管理员令牌（正式版首次启动时只打印一次）：查看有令牌的角色；给一个角色新令牌，或吊销它的全部令牌——它正在进行的对话会立刻结束。",
  "op.token": "管理员令牌",
  "op.list": "列出",
  "op.new_id": "角色 ID",
  "op.create": "新令牌",
  "op.col_character": "角色",
  "op.col_tokens": "令牌数",
  "op.revoke": "吊销",
  "op.listed": "{count} 个角色有令牌",
  "op.created": "{id} 的新令牌（只显示这一次）：{token}",
  "op.revoked": "已吊销 {id} 的全部令牌",
  "op.error": "出错（{code}）：{message}",

  // errors (codes from the server)
  "error.unauthorized": "令牌无效或已吊销",
  "error.forbidden": "没有权限",
  "error.rate_limited": "请求太频繁，请稍后再试",
  "error.backlog_full": "待整理的消息太多，请稍后再试",
  "error.timeout": "角色没有及时回应",
  "error.loading": "角色正在加载",
  "error.not_running": "角色未在运行",
  "error.unknown_event": "服务器不支持这个操作",
  "error.invalid_feedback": "反馈值无效",
  "error.not_found": "找不到",
  "error.internal": "服务器内部错误",
  "error.network": "网络错误",
  "error.generic": "出错了"
};

let table = zh;

// The string for key (the key itself when missing, so a gap shows up).
export function t(key, vars) {
  const s = Object.prototype.hasOwnProperty.call(table, key) ? table[key] : key;
  if (!vars) return s;
  return s.replace(/\{(\w+)\}/g, (m, name) => (vars[name] === undefined || vars[name] === null ? m : String(vars[name])));
}

// Fills the static markup: data-i18n (text), -placeholder, -title, -aria (aria-label).
export function apply(root) {
  (root || document).querySelectorAll("[data-i18n]").forEach((n) => { n.textContent = t(n.dataset.i18n); });
  (root || document).querySelectorAll("[data-i18n-placeholder]").forEach((n) => { n.placeholder = t(n.dataset.i18nPlaceholder); });
  (root || document).querySelectorAll("[data-i18n-title]").forEach((n) => { n.title = t(n.dataset.i18nTitle); });
  (root || document).querySelectorAll("[data-i18n-aria]").forEach((n) => { n.setAttribute("aria-label", t(n.dataset.i18nAria)); });
  document.title = t("page.title");
}
