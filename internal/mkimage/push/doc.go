// Command push copies the image make image wrote (an OCI archive: a tar of
// an OCI image layout) to a registry, keeping its digest: the image index of
// every platform, or the one image of a single-platform build.
//
//	push --archive FILE --ref-name NAME --to HOST/REPO[:TAG] --default-tag TAG
//
// --ref-name picks the archive's entry whose org.opencontainers.image.ref.name
// is NAME (make image names its image by IMAGE_TAG and by the version). The
// destination's tag is TAG, or --default-tag when it names none; a digest is
// refused (a push names a tag). Credentials come from the Docker config
// (docker login, ~/.docker/config.json) and its helpers, as crane's do; a
// registry on a loopback or private address is tried over HTTPS, then HTTP.
// It prints REF@DIGEST, the index's digest, once the registry answers it for
// the tag.
package main
