/* The interactive HTML viewer: one self-contained file (inline CSS and
 * JavaScript, no network) in the spirit of a head view. The weights are
 * embedded as JSON; the page draws the token lines and the heatmap. */
#include "viz_internal.h"
#include "../io/binfile.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#define HTML_MAX_TOKENS 1024
#define HTML_MAX_VALUES (4 * 1024 * 1024)

static const char page_head[] =
    "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
    "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
    "<title>";

static const char page_style[] =
    "</title>\n"
    "<style>\n"
    "body{font-family:'DejaVu Sans',sans-serif;margin:16px;color:#222;background:#fff}\n"
    "h1{font-size:18px;margin:0 0 8px}\n"
    "#bar{margin-bottom:10px;font-size:14px}\n"
    "#bar select{margin-right:14px}\n"
    "#main{display:flex;gap:28px;align-items:flex-start}\n"
    "#lines{display:block}\n"
    ".tok{font-size:13px;cursor:pointer;fill:#222}\n"
    ".tok.on{fill:#d62728;font-weight:bold}\n"
    "#info{font-size:13px;margin-top:8px;min-height:1.3em;color:#444}\n"
    "#heat{border:1px solid #555;image-rendering:pixelated;display:block}\n"
    ".cap{font-size:12px;color:#555;margin:2px 0 6px}\n"
    "#hwrap{display:flex;gap:6px;align-items:flex-start}\n"
    "#hrows{font-size:12px;text-align:right;padding-top:1px}\n"
    "#hrows div,#hcols div{overflow:hidden;white-space:nowrap}\n"
    /* rotated key labels hang from the map with a gap (their end at the
     * map, as a plotted axis's), the key caption under the longest one */
    "#hcols{display:flex;align-items:flex-start;font-size:12px;padding:4px 0 0 1px;margin-bottom:4px}\n"
    "#hcols div{writing-mode:vertical-rl;transform:rotate(180deg);max-height:90px;text-overflow:ellipsis}\n"
    ".on{color:#d62728;font-weight:bold}\n"
    "#cbar{display:flex;gap:4px;margin-left:10px;font-size:12px}\n"
    "#cgrad{width:14px;border:1px solid #555}\n"
    "#cticks{position:relative;width:48px}\n"
    "#cticks div{position:absolute;left:0;transform:translateY(-50%)}\n"
    ".axis{font-size:12px;color:#555;text-align:center}\n"
    "</style>\n"
    "</head>\n"
    "<body>\n"
    "<h1 id=\"title\"></h1>\n"
    "<div id=\"bar\"><label for=\"layer\" id=\"axis0\">layer</label> <select id=\"layer\"></select> head <select id=\"head\"></select></div>\n"
    "<div id=\"main\">\n"
    "<div><div class=\"cap\">queries (left) attend to keys (right); hover a token to isolate it</div>\n"
    "<svg id=\"lines\" xmlns=\"http://www.w3.org/2000/svg\"></svg></div>\n"
    "<div><div class=\"cap\">weights: rows are queries, columns keys; hover a cell for its value</div>\n"
    "<div id=\"hwrap\"><div id=\"hrows\"></div><div><canvas id=\"heat\"></canvas><div id=\"hcols\"></div><div class=\"axis\">key</div></div>\n"
    "<div id=\"cbar\"><div id=\"cgrad\"></div><div id=\"cticks\"></div></div></div>\n"
    "<div id=\"info\"></div></div>\n"
    "</div>\n"
    "<script>\n"
    "\"use strict\";\n"
    "const DATA = ";

/* The page script: reads DATA, fills the selectors, draws lines (opacity =
 * weight), the heatmap with its labels, values and colour bar, and isolates
 * a hovered token. */
static const char page_script[] =
    ";\n"
    "const VIR=[[68,1,84],[72,37,118],[65,68,135],[53,96,141],[42,120,142],[33,144,140],[34,168,132],[67,191,113],[122,209,81],[187,223,39],[253,231,37]];\n"
    "function rgb(t){t=Math.max(0,Math.min(1,t));const x=t*10;const i=Math.min(9,Math.floor(x));const f=x-i;return[0,1,2].map(k=>Math.round((1-f)*VIR[i][k]+f*VIR[i+1][k]));}\n"
    "function color(v,hi){if(v===null||!isFinite(v))return'rgb(255,0,255)';return'rgb('+rgb(hi>0?v/hi:0).join(',')+')';}\n"
    "const NS='http://www.w3.org/2000/svg';\n"
    "const svg=document.getElementById('lines');\n"
    "const canvas=document.getElementById('heat');\n"
    "const info=document.getElementById('info');\n"
    "const selL=document.getElementById('layer');\n"
    "const selH=document.getElementById('head');\n"
    "const rowsEl=document.getElementById('hrows');\n"
    "const colsEl=document.getElementById('hcols');\n"
    "const grad=document.getElementById('cgrad');\n"
    "const ticks=document.getElementById('cticks');\n"
    "document.getElementById('title').textContent=DATA.title;\n"
    "document.title=DATA.title;\n"
    "document.getElementById('axis0').textContent=DATA.axis;\n"
    "for(let l=0;l<DATA.layers;l++){const o=document.createElement('option');o.value=l;o.textContent=l;selL.appendChild(o);}\n"
    "for(let h=0;h<DATA.heads;h++){const o=document.createElement('option');o.value=h;o.textContent=h;selH.appendChild(o);}\n"
    "const ROW=20,LW=120,GAP=160;\n"
    "let focus=null;\n"
    "function weight(l,h,i,j){return DATA.w[((l*DATA.heads+h)*DATA.lq+i)*DATA.lk+j];}\n"
    "function maxOf(l,h){let m=0;for(let i=0;i<DATA.lq;i++)for(let j=0;j<DATA.lk;j++){const v=weight(l,h,i,j);if(v!==null&&isFinite(v)&&v>m)m=v;}return m;}\n"
    "function drawLines(){\n"
    " const l=+selL.value,h=+selH.value;\n"
    " while(svg.firstChild)svg.removeChild(svg.firstChild);\n"
    " const n=Math.max(DATA.lq,DATA.lk);\n"
    " svg.setAttribute('width',LW*2+GAP);svg.setAttribute('height',n*ROW+10);\n"
    " for(let i=0;i<DATA.lq;i++)for(let j=0;j<DATA.lk;j++){\n"
    "  if(focus&&((focus.side==='q'&&focus.i!==i)||(focus.side==='k'&&focus.i!==j)))continue;\n"
    "  const v=weight(l,h,i,j);if(v===null||!isFinite(v)||v<=0.001)continue;\n"
    "  const ln=document.createElementNS(NS,'line');\n"
    "  ln.setAttribute('x1',LW+4);ln.setAttribute('y1',i*ROW+ROW/2+5);\n"
    "  ln.setAttribute('x2',LW+GAP-4);ln.setAttribute('y2',j*ROW+ROW/2+5);\n"
    "  ln.setAttribute('stroke','#1f5fbf');ln.setAttribute('stroke-width',2);\n"
    "  ln.setAttribute('stroke-opacity',Math.min(1,v));svg.appendChild(ln);}\n"
    " const put=(side,k,x,anchor,txt)=>{const t=document.createElementNS(NS,'text');t.setAttribute('x',x);t.setAttribute('y',k*ROW+ROW/2+9);t.setAttribute('text-anchor',anchor);t.setAttribute('class','tok'+(focus&&focus.side===side&&focus.i===k?' on':''));t.textContent=txt;t.addEventListener('mouseenter',()=>{focus={side:side,i:k};redraw();});t.addEventListener('mouseleave',()=>{focus=null;redraw();});svg.appendChild(t);};\n"
    " for(let i=0;i<DATA.lq;i++)put('q',i,LW,'end',DATA.q[i]);\n"
    " for(let j=0;j<DATA.lk;j++)put('k',j,LW+GAP,'start',DATA.k[j]);\n"
    "}\n"
    "/* the heatmap as the PNG one: token labels on both axes (when the cells\n"
    " * can hold them), values in small maps, a colour bar with ticks */\n"
    "function labels(el,names,cell,side,horiz){\n"
    " while(el.firstChild)el.removeChild(el.firstChild);\n"
    " el.style.display=cell>=10?'':'none';\n"
    " names.forEach((s,k)=>{const d=document.createElement('div');d.textContent=s;d.className='lab'+(focus&&focus.side===side&&focus.i===k?' on':'');if(horiz)d.style.width=cell+'px';else d.style.height=cell+'px';d.style.lineHeight=cell+'px';el.appendChild(d);});\n"
    "}\n"
    "function drawHeat(){\n"
    " const l=+selL.value,h=+selH.value,hi=maxOf(l,h);\n"
    " const cell=Math.max(1,Math.min(40,Math.floor(480/Math.max(DATA.lq,DATA.lk))));\n"
    " canvas.width=DATA.lk*cell;canvas.height=DATA.lq*cell;\n"
    " const g=canvas.getContext('2d');\n"
    " let shown=0;\n"
    " const values=DATA.lq<=12&&DATA.lk<=12&&cell>=24;\n"
    " for(let i=0;i<DATA.lq;i++)for(let j=0;j<DATA.lk;j++){const v=weight(l,h,i,j);g.fillStyle=color(v,hi);g.fillRect(j*cell,i*cell,cell,cell);\n"
    "  if(values&&v!==null&&isFinite(v)){const c=rgb(hi>0?v/hi:0);g.fillStyle=0.299*c[0]+0.587*c[1]+0.114*c[2]<128?'#fff':'#000';g.font=Math.round(cell*0.3)+'px DejaVu Sans, sans-serif';g.textAlign='center';g.textBaseline='middle';g.fillText(v.toFixed(2),(j+0.5)*cell,(i+0.5)*cell);shown++;}}\n"
    " if(focus){g.strokeStyle='#d62728';g.lineWidth=2;if(focus.side==='q')g.strokeRect(1,focus.i*cell+1,DATA.lk*cell-2,cell-2);else g.strokeRect(focus.i*cell+1,1,cell-2,DATA.lq*cell-2);}\n"
    " canvas.dataset.cell=cell;canvas.dataset.values=shown;\n"
    " labels(rowsEl,DATA.q,cell,'q',false);labels(colsEl,DATA.k,cell,'k',true);\n"
    " const H=Math.max(120,DATA.lq*cell);\n"
    " grad.style.height=H+'px';\n"
    " const stops=[];for(let k=0;k<=10;k++)stops.push('rgb('+VIR[k].join(',')+') '+k*10+'%');\n"
    " grad.style.background='linear-gradient(to top,'+stops.join(',')+')';\n"
    " while(ticks.firstChild)ticks.removeChild(ticks.firstChild);\n"
    " ticks.style.height=H+'px';\n"
    " for(let k=0;k<=4;k++){const d=document.createElement('div');d.className='tick';d.style.top=(H*(1-k/4))+'px';d.textContent=(hi*k/4).toFixed(hi>=1?2:3);ticks.appendChild(d);}\n"
    "}\n"
    "function redraw(){drawLines();drawHeat();}\n"
    "canvas.addEventListener('mousemove',e=>{const c=+canvas.dataset.cell;const r=canvas.getBoundingClientRect();const j=Math.floor((e.clientX-r.left)/c),i=Math.floor((e.clientY-r.top)/c);if(i<0||j<0||i>=DATA.lq||j>=DATA.lk)return;const v=weight(+selL.value,+selH.value,i,j);info.textContent=DATA.q[i]+' \\u2192 '+DATA.k[j]+': '+(v===null?'NaN':v.toFixed(4));});\n"
    "/* #layer=1&head=2&focus=q3 opens a view (links, tests) */\n"
    "for(const part of location.hash.slice(1).split('&')){const kv=part.split('=');const v=kv[1]||'';if((kv[0]==='layer'||kv[0]===DATA.axis)&&+v<DATA.layers)selL.value=+v;if(kv[0]==='head'&&+v<DATA.heads)selH.value=+v;if(kv[0]==='focus'&&/^[qk][0-9]+$/.test(v))focus={side:v[0],i:+v.slice(1)};}\n"
    "selL.addEventListener('change',redraw);\n"
    "selH.addEventListener('change',redraw);\n"
    "redraw();\n"
    "</script>\n"
    "</body>\n"
    "</html>\n";

/* A JSON string literal that is also safe inside <script> and HTML. */
static void json_str(viz_buf *b, const char *s) {
    attn__viz_bput(b, "\"", 1);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            attn__viz_bprintf(b, "\\%c", c);
        else if (c < 0x20 || c == '<' || c == '>' || c == '&' || c == 0x7f)
            attn__viz_bprintf(b, "\\u%04x", c);
        else
            attn__viz_bput(b, (const char *)&c, 1);
    }
    attn__viz_bput(b, "\"", 1);
}

static void html_text(viz_buf *b, const char *s) {
    for (; *s; s++) {
        if (*s == '<')
            attn__viz_bput(b, "&lt;", 4);
        else if (*s == '>')
            attn__viz_bput(b, "&gt;", 4);
        else if (*s == '&')
            attn__viz_bput(b, "&amp;", 5);
        else
            attn__viz_bput(b, s, 1);
    }
}

static void tokens(viz_buf *b, const char *const *tok, int64_t n) {
    attn__viz_bput(b, "[", 1);
    char num[32];
    for (int64_t i = 0; i < n; i++) {
        if (i) attn__viz_bput(b, ",", 1);
        if (tok && tok[i]) {
            json_str(b, tok[i]);
        } else {
            snprintf(num, sizeof num, "%lld", (long long)i);
            json_str(b, num);
        }
    }
    attn__viz_bput(b, "]", 1);
}

attn_status attn_html_write(const char *path, const attn_tensor *w,
                            const attn_html_opts *opts) {
    if (!path || !path[0]) return attn__fail(ATTN_E_INVALID, "path is empty");
    attn_status st = attn__viz_check_weights(w, "w");
    if (st != ATTN_OK) return st;
    int64_t N = w->shape[0], H = w->shape[1], Lq = w->shape[2],
            Lk = w->shape[3];
    if (Lq > HTML_MAX_TOKENS || Lk > HTML_MAX_TOKENS)
        return attn__fail(ATTN_E_SHAPE,
                          "the viewer shows up to %d tokens per "
                          "side, w has %lld x %lld (draw a heatmap instead)",
                          HTML_MAX_TOKENS, (long long)Lq, (long long)Lk);
    int64_t total = attn_tensor_numel(w);
    if (total <= 0 || total > HTML_MAX_VALUES)
        return attn__fail(ATTN_E_SHAPE,
                          "w holds %lld weights; the viewer embeds "
                          "at most %d",
                          (long long)total, HTML_MAX_VALUES);
    const char *axis = opts && opts->first_axis ? opts->first_axis : "layer";
    size_t alen = strlen(axis);
    if (alen == 0 || alen > 32)
        return attn__fail(ATTN_E_INVALID,
                          "opts.first_axis has %zu characters (1..32)", alen);
    for (const char *c = axis; *c; c++)
        if (!isalnum((unsigned char)*c) && !strchr(" -_", *c))
            return attn__fail(ATTN_E_INVALID,
                              "opts.first_axis holds '%c'; letters, digits, "
                              "spaces, '-' and '_' only",
                              isprint((unsigned char)*c) ? *c : '?');
    /* a default title that says what is shown, as the PNG heatmap's */
    char deftitle[200];
    int batch = strcmp(axis, "batch") == 0;
    snprintf(deftitle, sizeof deftitle,
             "attention weights: %lld x %lld "
             "tokens, %lld %s%s x %lld head%s",
             (long long)Lq, (long long)Lk, (long long)N, axis,
             N == 1  ? ""
             : batch ? " entries"
                     : "s",
             (long long)H, H == 1 ? "" : "s");
    const char *title = opts && opts->title ? opts->title : deftitle;
    const char *const *qt = opts ? opts->q_tokens : NULL;
    const char *const *kt = opts ? opts->k_tokens : NULL;
    if (!kt && Lq == Lk) kt = qt;

    viz_buf b;
    memset(&b, 0, sizeof b);
    attn__viz_bput(&b, page_head, sizeof page_head - 1);
    html_text(&b, title);
    attn__viz_bput(&b, page_style, sizeof page_style - 1);
    attn__viz_bput(&b, "{\"title\":", 9);
    json_str(&b, title);
    attn__viz_bput(&b, ",\"axis\":", 8);
    json_str(&b, axis);
    attn__viz_bprintf(&b,
                      ",\"layers\":%lld,\"heads\":%lld,\"lq\":%lld,\"lk\":%lld,"
                      "\"q\":",
                      (long long)N, (long long)H, (long long)Lq, (long long)Lk);
    tokens(&b, qt, Lq);
    attn__viz_bput(&b, ",\"k\":", 5);
    tokens(&b, kt, Lk);
    attn__viz_bput(&b, ",\"w\":[", 6);
    int64_t at = 0;
    for (int64_t n = 0; n < N; n++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < Lq; i++)
                for (int64_t j = 0; j < Lk; j++, at++) {
                    double v = attn_tensor_get(w, n, h, i, j);
                    if (at) attn__viz_bput(&b, ",", 1);
                    if (!isfinite(v))
                        attn__viz_bput(&b, "null", 4);
                    else
                        attn__viz_bprintf(&b, "%.4g", v);
                }
    attn__viz_bput(&b, "]}", 2);
    attn__viz_bput(&b, page_script, sizeof page_script - 1);
    if (b.oom) {
        attn__viz_buf_free(&b);
        return attn__fail(ATTN_E_NOMEM, "out of memory building '%s'", path);
    }
    st = attn__write_atomic(path, (const unsigned char *)b.s, b.len);
    attn__viz_buf_free(&b);
    return st;
}
