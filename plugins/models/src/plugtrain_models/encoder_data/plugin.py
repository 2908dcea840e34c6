"""The hook implementations of the ``encoder_data`` plugin of plugtrain-models (no torch import)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from plugtrain import hookimpl
from plugtrain_models.encoder_data import schemas_bert as bert
from plugtrain_models.encoder_data import schemas_text as text

if TYPE_CHECKING:
    from plugtrain.registry import ComponentRegistrar

DATALOADERS = {
    "BertCSVDynamicMaskDataProcessor": (
        "bert_csv:bert_dynamic_mask_loader",
        bert.BertDynamicMaskArgs,
    ),
    "BertCSVDataProcessor": ("bert_csv:bert_csv_loader", bert.BertCSVArgs),
    "BertHDF5DataProcessor": ("bert_hdf5:bert_hdf5_loader", bert.BertHDF5Args),
    "BertTokenClassifierDataProcessor": (
        "finetuning:token_classifier_loader",
        bert.TokenClassifierArgs,
    ),
    "BertSumCSVDataProcessor": ("finetuning:bert_sum_loader", bert.BertSumArgs),
    "MNLIDataProcessor": ("glue:mnli_loader", text.MNLIArgs),
    "SST2DataProcessor": ("glue:sst2_loader", text.SST2Args),
    "DPRHDF5DataProcessor": ("dpr:dpr_loader", text.DPRArgs),
    "T5DynamicDataProcessor": ("seq2seq:t5_loader", text.T5Args),
    "TransformerDynamicDataProcessor": ("seq2seq:transformer_loader", text.TransformerArgs),
}
"""Model Zoo's name -> (module:factory in this package, argument schema)."""


@hookimpl
def plugtrain_register_dataloaders(registry: ComponentRegistrar) -> None:
    """Register Model Zoo's data processors of the text encoders and encoder-decoders."""
    for name, (target, schema) in DATALOADERS.items():
        registry.register(name, f"plugtrain_models.encoder_data.{target}", schema=schema)
