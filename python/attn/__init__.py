"""attn: attention mechanisms of the Transformer, from NumPy.

A thin ctypes binding of libattn (C11). The main entry point reads like
PyTorch's::

    import attn
    out = attn.scaled_dot_product_attention(q, k, v, is_causal=True)

Errors raise attn.AttnError (a ValueError) with the library's message.
$ATTN_LIBRARY, when set, names the libattn.so to load instead of the one
installed inside this package.
"""

from . import _blas_env  # noqa: F401 (first: before NumPy loads OpenBLAS)
from ._lib import (ATTN_E_DTYPE, ATTN_E_FORMAT, ATTN_E_INVALID, ATTN_E_IO,
                   ATTN_E_NOMEM, ATTN_E_NONFINITE, ATTN_E_SHAPE,
                   ATTN_E_UNSUPPORTED, ATTN_OK, STATUS_NAMES, AttnError,
                   library_path, version)
from .sdpa import (BLOCK_EMPTY, BLOCK_FULL, BLOCK_PARTIAL, block_mask,
                   doc_ids_from_cu_seqlens, scaled_dot_product_attention,
                   sdpa_backward)
from .cache import KVCache, sdpa_cached
from .layers import (AdditiveAttention, EncoderLayer, MultiHeadAttention,
                     MultiheadAttention, additive_attention)
from .transformer import DecoderLayer, TokenTransformer
from .modules import (Transformer, TransformerDecoder, TransformerDecoderLayer,
                      TransformerEncoder, TransformerEncoderLayer)
from .viz import VERDICT_FLAGS, compare, heatmap, stats, text_heatmap
from .tiles import block_average, weight_tiles
from .figures import diff_heatmap, figure, geometry, html
from .pretrained import BertModel, load_model
from .rope import rope, rope_backward, rope_inv_freq
from . import llama
from .tokenizer import Tokenizer

# the version of the library it loads: one source (VERSION), no copy here
__version__ = version()

__all__ = [
    "AttnError", "scaled_dot_product_attention", "sdpa_backward", "version",
    "block_mask", "BLOCK_EMPTY", "BLOCK_FULL", "BLOCK_PARTIAL",
    "doc_ids_from_cu_seqlens",
    "KVCache", "sdpa_cached",
    "AdditiveAttention", "additive_attention", "MultiHeadAttention",
    "MultiheadAttention",
    "EncoderLayer", "DecoderLayer", "TokenTransformer", "Transformer",
    "TransformerEncoderLayer", "TransformerDecoderLayer", "TransformerEncoder",
    "TransformerDecoder", "heatmap", "stats", "text_heatmap", "compare", "VERDICT_FLAGS",
    "weight_tiles", "block_average", "html", "figure", "diff_heatmap",
    "geometry", "load_model", "BertModel", "Tokenizer", "rope",
    "rope_backward", "rope_inv_freq",
    "library_path", "STATUS_NAMES", "ATTN_OK", "ATTN_E_INVALID",
    "ATTN_E_SHAPE", "ATTN_E_DTYPE", "ATTN_E_UNSUPPORTED", "ATTN_E_NOMEM",
    "ATTN_E_IO", "ATTN_E_FORMAT", "ATTN_E_NONFINITE",
]
