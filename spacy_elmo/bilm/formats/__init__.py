"""Files a biLM is read from and written to: bilm-tf's ``options.json`` + ``weights.hdf5``, the
package's bytes, ELMoForManyLangs' directories, and the weights' identity (a digest) for caches."""
